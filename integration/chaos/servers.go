package chaos

import "github.com/lanes-dev/lanes/internal/redisproc"

// The redis-server processes, the cluster, the Sentinel setup, the TLS
// files and the fault-injecting proxy live in internal/redisproc, in the
// root module, so that tests there use them without depending on this
// module (and porcupine). These are their names here.
type (
	ServerOptions = redisproc.ServerOptions
	Server        = redisproc.Server
	Cluster       = redisproc.Cluster
	Sentinel      = redisproc.Sentinel
	Proxy         = redisproc.Proxy
	TLSFiles      = redisproc.TLSFiles
)

// Functions of internal/redisproc.
var (
	RequireRedisServer = redisproc.RequireRedisServer
	StartServer        = redisproc.StartServer
	FreePort           = redisproc.FreePort
	InfoField          = redisproc.InfoField
	WaitReplicaSynced  = redisproc.WaitReplicaSynced
	StartCluster       = redisproc.StartCluster
	StartClusterWith   = redisproc.StartClusterWith
	StartSentinel      = redisproc.StartSentinel
	StartProxy         = redisproc.StartProxy
	NewTLSFiles        = redisproc.NewTLSFiles
)
