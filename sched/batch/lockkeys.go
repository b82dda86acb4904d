package batch

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/lanes-dev/lanes/sched"
)

// filePrefix marks a lock key template whose rest is a file path.
const filePrefix = "file:"

// template is one parsed lock key template: literal text and {NAME}
// placeholders, in order.
type template struct {
	parts []part
	file  bool // the text starts with "file:": the rest is a path
}

// part is literal text, or the argument named arg when arg is set.
type part struct {
	text string
	arg  bool
}

// parseTemplate parses s: "{NAME}" stands for the top-level argument NAME;
// braces do not nest and have no escape.
func parseTemplate(s string) (template, error) {
	if s == "" {
		return template{}, errors.New("empty template")
	}
	t := template{file: strings.HasPrefix(s, filePrefix)}
	if t.file {
		s = s[len(filePrefix):]
		if s == "" {
			return template{}, errors.New(`"file:" needs a path after it`)
		}
	}
	for s != "" {
		open := strings.IndexByte(s, '{')
		if c := strings.IndexByte(s, '}'); c >= 0 && (open < 0 || c < open) {
			return template{}, errors.New(`"}" without "{"`)
		}
		if open < 0 {
			t.parts = append(t.parts, part{text: s})
			break
		}
		if open > 0 {
			t.parts = append(t.parts, part{text: s[:open]})
		}
		s = s[open+1:]
		end := strings.IndexByte(s, '}')
		switch {
		case end < 0:
			return template{}, errors.New(`"{" without "}"`)
		case strings.IndexByte(s[:end], '{') >= 0:
			return template{}, errors.New(`"{" inside "{...}"`)
		case end == 0:
			return template{}, errors.New(`"{}" names no argument`)
		}
		t.parts = append(t.parts, part{text: s[:end], arg: true})
		s = s[end+1:]
	}
	return t, nil
}

// expand returns t with args in place of its placeholders, and whether it
// is a file path.
func (t template) expand(args map[string]any) (string, error) {
	var b strings.Builder
	for _, p := range t.parts {
		if !p.arg {
			b.WriteString(p.text)
			continue
		}
		v, ok := args[p.text]
		switch v := v.(type) {
		case string:
			b.WriteString(v)
		case json.Number:
			b.WriteString(canonicalNumber(v))
		default:
			if !ok {
				return "", fmt.Errorf("argument %q is missing", p.text)
			}
			return "", fmt.Errorf("argument %q is %s, not a string or a number", p.text, jsonKind(v))
		}
	}
	return b.String(), nil
}

// lockKeys returns the LockKeysFunc of templates ts: file paths are taken
// against workspace ("" means the working directory).
func lockKeys(ts []template, workspace string) sched.LockKeysFunc {
	return func(_ context.Context, raw json.RawMessage) ([]string, error) {
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		var args map[string]any
		if err := dec.Decode(&args); err != nil || args == nil {
			return nil, errors.New("the arguments are not a JSON object")
		}
		keys := make([]string, 0, len(ts))
		for _, t := range ts {
			s, err := t.expand(args)
			if err != nil {
				return nil, err
			}
			if t.file {
				if s, err = sched.FileKey(workspace, s); err != nil {
					return nil, err
				}
			}
			keys = append(keys, s)
		}
		return keys, nil
	}
}

// jsonKind names the JSON type of a decoded value, with an article.
func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	default:
		return fmt.Sprintf("a %T", v)
	}
}

// canonicalNumber writes n the same way however the model spelled it, so
// 1, 1.0 and 1e0 name one lock: an integer in decimal, any other number in
// Go's shortest form. A number that does not parse is written as given.
func canonicalNumber(n json.Number) string {
	if i, err := n.Int64(); err == nil {
		return strconv.FormatInt(i, 10)
	}
	f, err := n.Float64()
	if err != nil {
		return n.String()
	}
	if f == math.Trunc(f) && math.Abs(f) < 1<<53 {
		return strconv.FormatInt(int64(f), 10)
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}
