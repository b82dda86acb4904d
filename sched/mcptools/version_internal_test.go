package mcptools

import (
	"runtime/debug"
	"testing"
)

// versionIn reads the lanes module's version where the build recorded it:
// the main module when a program of this module is built, a dependency
// (or its replacement) otherwise, "devel" when there is none. No Redis.
func TestModuleVersionFromBuildInfo(t *testing.T) {
	for _, tt := range []struct {
		name string
		bi   debug.BuildInfo
		want string
	}{
		{"main module, tagged", debug.BuildInfo{Main: debug.Module{Path: modulePath, Version: "v1.4.0"}}, "v1.4.0"},
		{"main module, in its tree", debug.BuildInfo{Main: debug.Module{Path: modulePath, Version: "(devel)"}}, "devel"},
		{"a dependency of lanectl", debug.BuildInfo{Main: debug.Module{Path: modulePath + "/cmd/lanectl", Version: "v1.4.0"},
			Deps: []*debug.Module{{Path: "github.com/redis/go-redis/v9", Version: "v9.7.0"}, {Path: modulePath, Version: "v1.3.9"}}}, "v1.3.9"},
		{"a dependency replaced by a version", debug.BuildInfo{Main: debug.Module{Path: "example.com/app"},
			Deps: []*debug.Module{{Path: modulePath, Version: "v1.3.9", Replace: &debug.Module{Path: "example.com/fork", Version: "v1.3.10"}}}}, "v1.3.10"},
		{"a dependency replaced by a directory", debug.BuildInfo{Main: debug.Module{Path: "example.com/app"},
			Deps: []*debug.Module{{Path: modulePath, Version: "v1.3.9", Replace: &debug.Module{Path: "../lanes"}}}}, "devel"},
		{"not built with it", debug.BuildInfo{Main: debug.Module{Path: "example.com/app"}}, "devel"},
	} {
		if got := versionIn(&tt.bi); got != tt.want {
			t.Errorf("%s: versionIn() = %q; want %q", tt.name, got, tt.want)
		}
	}
}
