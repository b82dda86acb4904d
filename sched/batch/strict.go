package batch

import (
	"fmt"
	"slices"
	"strings"

	"github.com/BurntSushi/toml"

	"github.com/lanes-dev/lanes/internal/textdist"
)

// The key names of each table, spelled exactly: the decoder also matches a
// field whose name differs only in case, which this configuration does not
// accept.
var (
	topKeys         = []string{"runner", "tools", "reply", "mcp_servers"}
	runnerKeys      = []string{"max_concurrent_tools", "per_tenant", "per_tool", "parallel_tool_calls", "on_tool_error", "workspace", "unmarked", "retention"}
	toolKeys        = toolFields
	serverKeys      = []string{"command", "env", "url", "prefix", "start_timeout"}
	concurrencyKeys = []string{"key", "limit"}
	rateKeys        = []string{"key", "limit", "per"}
	fanOutKeys      = []string{"enabled", "on_error"}
)

// unknownKeys reports, in file order, the keys no field took, and those a
// field took only by ignoring case.
func (p *parser) unknownKeys() {
	undecoded := map[string]bool{}
	for _, k := range p.md.Undecoded() {
		undecoded[k.String()] = true
	}
	var reported []toml.Key
	for _, k := range p.md.Keys() {
		if under(k, p.bad) || under(k, reported) || freeForm(k) {
			continue
		}
		names := namesAt(k)
		last := k[len(k)-1]
		if !undecoded[k.String()] && (names == nil || slices.Contains(names, last)) {
			continue
		}
		msg := "unknown key"
		if s := suggest(names, last); s != "" {
			msg += fmt.Sprintf(" (did you mean %s?)", s)
		} else if names != nil {
			msg += " (known: " + strings.Join(names, ", ") + ")"
		}
		p.problems = append(p.problems, oneLine(k.String()+": "+msg))
		reported = append(reported, k)
	}
}

// namesAt returns the key names allowed for the last part of k, or nil when
// any is (a tool name, a per_tool entry).
func namesAt(k toml.Key) []string {
	switch {
	case len(k) == 1:
		return topKeys
	case k[0] == "runner" && len(k) == 2:
		return runnerKeys
	case k[0] == "reply" && len(k) == 2:
		return replyKeys()
	case k[0] == "tools" && len(k) == 3:
		return toolKeys
	case k[0] == "tools" && len(k) == 4 && k[2] == "concurrency":
		return concurrencyKeys
	case k[0] == "tools" && len(k) == 4 && k[2] == "rate":
		return rateKeys
	case k[0] == "tools" && len(k) == 4 && k[2] == "fan_out":
		return fanOutKeys
	case k[0] == "mcp_servers" && len(k) == 3:
		return serverKeys
	}
	return nil
}

// under reports whether k is one of keys or lies under one.
func under(k toml.Key, keys []toml.Key) bool {
	for _, b := range keys {
		if len(k) >= len(b) && slices.Equal(k[:len(b)], b) {
			return true
		}
	}
	return false
}

// suggest returns the name of names that s most likely misspells, or "".
func suggest(names []string, s string) string {
	best, bestD := "", 3
	for _, n := range names {
		if strings.EqualFold(n, s) {
			return n
		}
		if d := distance(n, strings.ToLower(s)); d < bestD {
			best, bestD = n, d
		}
	}
	return best
}

// distance is the Levenshtein distance of a and b, in bytes, or 64 for
// longer strings.
func distance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 64
	}
	return textdist.Levenshtein(a, b)
}

// describe names the TOML type of a decoded value, with an article.
func describe(x any) string {
	switch x := x.(type) {
	case nil:
		return "nothing"
	case string:
		return fmt.Sprintf("the string %.40q", x)
	case int64:
		return fmt.Sprintf("the integer %d", x)
	case float64:
		return fmt.Sprintf("the float %v", x)
	case bool:
		return fmt.Sprintf("the boolean %v", x)
	case []any, []map[string]any:
		return "an array"
	case map[string]any:
		return "a table"
	default:
		return "a date or time"
	}
}
