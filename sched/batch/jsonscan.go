package batch

import (
	"encoding/json"
	"errors"
)

// The model response is read one level at a time: the scanner below checks
// the syntax of the whole document with no limit on nesting (encoding/json
// refuses anything deeper than 10,000 levels, which would fail every call
// of a response for one call's arguments) and splits objects and arrays
// into the spans of their members, which stay as written. A call's
// arguments are judged on their own, as that call's outcome.

// errSyntax is the scanner's answer to text that is not JSON; the message
// the reader prints comes from encoding/json when it has one.
var errSyntax = errors.New("invalid JSON")

// skipSpace returns the offset of the first non-space byte from i.
func skipSpace(data []byte, i int) int {
	for i < len(data) {
		switch data[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// valueEnd returns the offset just past the JSON value that starts at
// data[i] (no space before it), checking its syntax at any depth.
func valueEnd(data []byte, i int) (int, error) {
	var stack []byte // '{' or '[' per open container
	for {
		// A value.
		if i >= len(data) {
			return 0, errSyntax
		}
		var err error
		switch c := data[i]; {
		case c == '{' || c == '[':
			stack = append(stack, c)
			i = skipSpace(data, i+1)
			close := byte('}')
			if c == '[' {
				close = ']'
			}
			if i < len(data) && data[i] == close {
				stack = stack[:len(stack)-1]
				i++
				break
			}
			if c == '{' {
				if i, err = memberKey(data, i); err != nil {
					return 0, err
				}
			}
			continue // the first member's value
		case c == '"':
			i, err = stringEnd(data, i)
		case c == '-' || (c >= '0' && c <= '9'):
			i, err = numberEnd(data, i)
		case c == 't':
			i, err = literalEnd(data, i, "true")
		case c == 'f':
			i, err = literalEnd(data, i, "false")
		case c == 'n':
			i, err = literalEnd(data, i, "null")
		default:
			return 0, errSyntax
		}
		if err != nil {
			return 0, err
		}
		// After a value: close containers, or go on to the next member.
		for {
			if len(stack) == 0 {
				return i, nil
			}
			i = skipSpace(data, i)
			if i >= len(data) {
				return 0, errSyntax
			}
			top := stack[len(stack)-1]
			switch {
			case data[i] == ',':
				i = skipSpace(data, i+1)
				if top == '{' {
					if i, err = memberKey(data, i); err != nil {
						return 0, err
					}
				}
			case (top == '{' && data[i] == '}') || (top == '[' && data[i] == ']'):
				stack = stack[:len(stack)-1]
				i++
				continue
			default:
				return 0, errSyntax
			}
			break
		}
	}
}

// memberKey reads `"key" :` at data[i] and returns the offset of the value.
func memberKey(data []byte, i int) (int, error) {
	if i >= len(data) || data[i] != '"' {
		return 0, errSyntax
	}
	i, err := stringEnd(data, i)
	if err != nil {
		return 0, err
	}
	i = skipSpace(data, i)
	if i >= len(data) || data[i] != ':' {
		return 0, errSyntax
	}
	return skipSpace(data, i+1), nil
}

// stringEnd returns the offset past the string that starts at data[i].
func stringEnd(data []byte, i int) (int, error) {
	for i++; i < len(data); i++ {
		switch c := data[i]; {
		case c == '"':
			return i + 1, nil
		case c < 0x20:
			return 0, errSyntax
		case c == '\\':
			i++
			if i >= len(data) {
				return 0, errSyntax
			}
			switch data[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if i+4 >= len(data) {
					return 0, errSyntax
				}
				for _, h := range data[i+1 : i+5] {
					if !isHex(h) {
						return 0, errSyntax
					}
				}
				i += 4
			default:
				return 0, errSyntax
			}
		}
	}
	return 0, errSyntax
}

func isHex(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

// numberEnd returns the offset past the number that starts at data[i].
func numberEnd(data []byte, i int) (int, error) {
	digits := func(i int) (int, bool) {
		j := i
		for j < len(data) && data[j] >= '0' && data[j] <= '9' {
			j++
		}
		return j, j > i
	}
	if data[i] == '-' {
		i++
	}
	switch {
	case i < len(data) && data[i] == '0':
		i++
	default:
		var ok bool
		if i, ok = digits(i); !ok {
			return 0, errSyntax
		}
	}
	if i < len(data) && data[i] == '.' {
		var ok bool
		if i, ok = digits(i + 1); !ok {
			return 0, errSyntax
		}
	}
	if i < len(data) && (data[i] == 'e' || data[i] == 'E') {
		i++
		if i < len(data) && (data[i] == '+' || data[i] == '-') {
			i++
		}
		var ok bool
		if i, ok = digits(i); !ok {
			return 0, errSyntax
		}
	}
	return i, nil
}

func literalEnd(data []byte, i int, lit string) (int, error) {
	if len(data)-i < len(lit) || string(data[i:i+len(lit)]) != lit {
		return 0, errSyntax
	}
	return i + len(lit), nil
}

// checkDocument reports whether data is one JSON value, at any depth, with
// only spaces around it. Its error is encoding/json's description when
// encoding/json has one.
func checkDocument(data []byte) error {
	start := skipSpace(data, 0)
	end, err := valueEnd(data, start)
	if err == nil && skipSpace(data, end) == len(data) {
		return nil
	}
	if jerr := json.Unmarshal(data, new(json.RawMessage)); jerr != nil {
		return jerr
	}
	if len(data) == 0 {
		return errors.New("the input is empty")
	}
	return errSyntax
}

// member is one member of an object: its key, decoded, and its value as
// written.
type member struct {
	key   string
	value json.RawMessage
}

// splitObject returns the members of the object v, whose syntax
// checkDocument accepted, in written order; ok is false when v is not an
// object.
func splitObject(v []byte) (members []member, ok bool) {
	i := skipSpace(v, 0)
	if i >= len(v) || v[i] != '{' {
		return nil, false
	}
	i = skipSpace(v, i+1)
	if i < len(v) && v[i] == '}' {
		return []member{}, true
	}
	for i < len(v) {
		kEnd, err := stringEnd(v, i)
		if err != nil {
			return nil, false
		}
		var key string
		if json.Unmarshal(v[i:kEnd], &key) != nil {
			return nil, false
		}
		vStart := skipSpace(v, skipSpace(v, kEnd)+1) // past ':'
		vEnd, err := valueEnd(v, vStart)
		if err != nil {
			return nil, false
		}
		members = append(members, member{key, json.RawMessage(v[vStart:vEnd])})
		i = skipSpace(v, vEnd)
		if i < len(v) && v[i] == '}' {
			return members, true
		}
		i = skipSpace(v, i+1) // past ','
	}
	return nil, false
}

// splitArray returns the elements of the array v, whose syntax
// checkDocument accepted; ok is false when v is not an array.
func splitArray(v []byte) (elems []json.RawMessage, ok bool) {
	i := skipSpace(v, 0)
	if i >= len(v) || v[i] != '[' {
		return nil, false
	}
	i = skipSpace(v, i+1)
	if i < len(v) && v[i] == ']' {
		return []json.RawMessage{}, true
	}
	for i < len(v) {
		end, err := valueEnd(v, i)
		if err != nil {
			return nil, false
		}
		elems = append(elems, json.RawMessage(v[i:end]))
		i = skipSpace(v, end)
		if i < len(v) && v[i] == ']' {
			return elems, true
		}
		i = skipSpace(v, i+1) // past ','
	}
	return nil, false
}

// objectMap returns the members of the object v by key, the last of a
// repeated key winning, as encoding/json decodes it.
func objectMap(v []byte) (map[string]json.RawMessage, bool) {
	members, ok := splitObject(v)
	if !ok {
		return nil, false
	}
	m := make(map[string]json.RawMessage, len(members))
	for _, mb := range members {
		m[mb.key] = mb.value
	}
	return m, true
}
