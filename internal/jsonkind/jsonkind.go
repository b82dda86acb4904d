// Package jsonkind names the kind of a JSON value in words, for messages
// that say what a field holds instead of naming Go types.
package jsonkind

import "bytes"

// Of names the kind of the JSON value v, with an article: "an object",
// "an array", "a string", "a number", "a boolean", "null", or "nothing"
// for empty input. It looks at v's first byte only: v is assumed valid.
func Of(v []byte) string {
	v = bytes.TrimSpace(v)
	if len(v) == 0 {
		return "nothing"
	}
	switch v[0] {
	case '{':
		return "an object"
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}
