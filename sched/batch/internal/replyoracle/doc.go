// Package replyoracle holds no code. Its tests check that the replies of
// package batch (Response.Reply) parse as each provider's request type,
// with the providers' official Go SDKs as the oracles: only these tests
// import the SDKs, so no package of lanes' library does.
package replyoracle
