package redislane

import (
	"encoding/json"
	"strconv"
	"unicode/utf8"

	"github.com/lanes-dev/lanes/lanes"
)

// appendRequests appends the JSON of reqs as enqueue.lua reads them: the
// bytes json.Marshal gives for the same requests as []wireRequest (a test
// holds them equal), without building those values first.
func appendRequests(buf []byte, reqs []lanes.Request) []byte {
	buf = append(buf, '[')
	for i, r := range reqs {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = append(buf, `{"id":`...)
		buf = appendString(buf, r.ID)
		buf = append(buf, `,"k":`...)
		if len(r.Lanes) == 0 {
			buf = append(buf, "null"...)
		} else {
			buf = append(buf, '[')
			for j, l := range r.Lanes {
				if j > 0 {
					buf = append(buf, ',')
				}
				buf = append(buf, '[')
				buf = appendString(buf, l.Key)
				buf = append(buf, ',')
				buf = strconv.AppendInt(buf, int64(l.Limit), 10)
				if !l.Rate.IsZero() { // rate lanes: [key, limit, rate limit, window ms, cost]
					buf = append(buf, ',')
					buf = strconv.AppendInt(buf, int64(l.Rate.Limit), 10)
					buf = append(buf, ',')
					buf = strconv.AppendInt(buf, l.Rate.Per.Milliseconds(), 10)
					buf = append(buf, ',')
					buf = strconv.AppendInt(buf, int64(max(l.Cost, 1)), 10)
				}
				buf = append(buf, ']')
			}
			buf = append(buf, ']')
		}
		if r.CallID != "" {
			buf = append(buf, `,"c":`...)
			buf = appendString(buf, r.CallID)
		}
		if r.Tool != "" {
			buf = append(buf, `,"t":`...)
			buf = appendString(buf, r.Tool)
		}
		if r.Tenant != "" {
			buf = append(buf, `,"n":`...)
			buf = appendString(buf, r.Tenant)
		}
		if len(r.Lineage) > 0 {
			buf = append(buf, `,"l":[`...)
			for j, id := range r.Lineage {
				if j > 0 {
					buf = append(buf, ',')
				}
				buf = appendString(buf, id)
			}
			buf = append(buf, ']')
		}
		buf = append(buf, '}')
	}
	return append(buf, ']')
}

// appendString appends s as a JSON string, as json.Marshal writes it: a
// string of printable ASCII that needs no escape (the common case: ids and
// keys) is copied as it is; any other goes through json.Marshal, so that
// escapes, HTML-safe characters and invalid UTF-8 come out the same.
func appendString(buf []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= utf8.RuneSelf || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			js, _ := json.Marshal(s) // a string always marshals
			return append(buf, js...)
		}
	}
	buf = append(buf, '"')
	buf = append(buf, s...)
	return append(buf, '"')
}
