package main

import (
	"runtime/debug"
	"strings"
)

// version is lanectl's version when the build stamps one:
//
//	go build -ldflags "-X main.version=v1.2.3" ./cmd/lanectl
//
// Otherwise buildVersion reads what the Go toolchain recorded.
var version string

// buildVersion returns what `lanectl --version` prints after the name: the
// stamped version, else the main module's version as go build recorded it
// (a tag, or a pseudo-version from the commit, "+dirty" for a tree with
// uncommitted changes; "devel" when it recorded none), then the commit and
// the Go version.
func buildVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return orDevel(version)
	}
	return describeBuild(version, bi)
}

// plainVersion is lanectl's version alone, for what names it to other
// programs (the MCP serverInfo and clientInfo of `mcp serve` and of the
// MCP servers' clients): the stamped version, else the main module's as go
// build recorded it, else "devel".
func plainVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return orDevel(version)
	}
	return mainVersion(version, bi)
}

// mainVersion is plainVersion on the build information bi.
func mainVersion(stamped string, bi *debug.BuildInfo) string {
	if stamped == "" && bi.Main.Version != "(devel)" {
		stamped = bi.Main.Version
	}
	return orDevel(stamped)
}

// describeBuild is buildVersion on the build information bi.
func describeBuild(stamped string, bi *debug.BuildInfo) string {
	v := mainVersion(stamped, bi)
	var extra []string
	settings := map[string]string{}
	for _, s := range bi.Settings {
		settings[s.Key] = s.Value
	}
	if rev := settings["vcs.revision"]; rev != "" {
		if len(rev) > 12 {
			rev = rev[:12]
		}
		if settings["vcs.modified"] == "true" {
			rev += ", modified"
		}
		extra = append(extra, "commit "+rev)
	}
	if bi.GoVersion != "" {
		extra = append(extra, bi.GoVersion)
	}
	if len(extra) > 0 {
		v += " (" + strings.Join(extra, ", ") + ")"
	}
	return v
}

func orDevel(v string) string {
	if v == "" {
		return "devel"
	}
	return v
}
