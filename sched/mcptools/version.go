package mcptools

import (
	"runtime/debug"
	"sync"
)

// modulePath is the module this package belongs to.
const modulePath = "github.com/lanes-dev/lanes"

// ModuleVersion returns the version of the lanes module this package was
// built from, as the Go toolchain recorded it in the program (a tag, or a
// pseudo-version), or "devel" when it recorded none (a build inside the
// module's own tree, a go.work, a replace by a directory): what a Proxy
// and a Connector give as their version unless told the program's own
// (ProxyOptions.Version, Connector.Version).
func ModuleVersion() string { return moduleVersion() }

var moduleVersion = sync.OnceValue(func() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "devel"
	}
	return versionIn(bi)
})

// versionIn is ModuleVersion read from bi.
func versionIn(bi *debug.BuildInfo) string {
	m := &bi.Main
	if m.Path != modulePath {
		m = nil
		for _, d := range bi.Deps {
			if d.Path == modulePath {
				m = d
				break
			}
		}
	}
	if m == nil {
		return "devel"
	}
	if m.Replace != nil {
		m = m.Replace
	}
	if m.Version == "" || m.Version == "(devel)" {
		return "devel"
	}
	return m.Version
}

// orModuleVersion returns v, or ModuleVersion when v is empty.
func orModuleVersion(v string) string {
	if v == "" {
		return ModuleVersion()
	}
	return v
}
