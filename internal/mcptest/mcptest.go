// Package mcptest builds the MCP server of the tests (./server, made with
// the official Go SDK) and reads what it logs.
package mcptest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Build builds the test server into dir and returns the program's path.
func Build(dir string) (string, error) {
	bin := filepath.Join(dir, "mcptest-server")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/lanes-dev/lanes/internal/mcptest/server")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("building the MCP test server: %v: %s", err, out.String())
	}
	return bin, nil
}

// Entry is one line of the server's log.
type Entry struct {
	Kind   string            // start, end or cancelled
	Label  string            // the call's label (append: its text)
	Tokens map[string]uint64 // start: the lanes/tokens the request carried
}

// ReadLog reads the server's log at path; a log not written yet is empty.
func ReadLog(path string) ([]Entry, error) {
	data, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []Entry
	for _, line := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
		if line == "" {
			continue
		}
		kind, rest, _ := strings.Cut(line, " ")
		e := Entry{Kind: kind, Label: rest}
		if kind == "start" {
			label, tokens, _ := strings.Cut(rest, " ")
			e.Label = label
			if err := json.Unmarshal([]byte(tokens), &e.Tokens); err != nil {
				return nil, fmt.Errorf("log line %q: tokens: %v", line, err)
			}
		}
		out = append(out, e)
	}
	return out, nil
}

// MostAtOnce returns how many calls ran at once at most: started and not
// yet ended or cancelled.
func MostAtOnce(log []Entry) int {
	running, most := map[string]bool{}, 0
	for _, e := range log {
		if e.Kind == "start" {
			running[e.Label] = true
		} else {
			delete(running, e.Label)
		}
		most = max(most, len(running))
	}
	return most
}

// Labels returns the labels of the entries of kind, in log order.
func Labels(log []Entry, kind string) []string {
	var out []string
	for _, e := range log {
		if e.Kind == kind {
			out = append(out, e.Label)
		}
	}
	return out
}

// Find returns the first entry of kind and label, and whether there is one.
func Find(log []Entry, kind, label string) (Entry, bool) {
	for _, e := range log {
		if e.Kind == kind && e.Label == label {
			return e, true
		}
	}
	return Entry{}, false
}
