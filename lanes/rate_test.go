package lanes_test

import (
	"errors"
	"testing"
	"time"

	"github.com/lanes-dev/lanes/lanes"
)

func TestParseRate(t *testing.T) {
	for in, want := range map[string]lanes.Rate{
		"10/s":      {Limit: 10, Per: time.Second},
		"60/m":      {Limit: 60, Per: time.Minute},
		"5/h":       {Limit: 5, Per: time.Hour},
		"100/250ms": {Limit: 100, Per: 250 * time.Millisecond},
	} {
		got, err := lanes.ParseRate(in)
		if err != nil || got != want {
			t.Errorf("ParseRate(%q) = %v, %v; want %v", in, got, err, want)
		}
		if back, err := lanes.ParseRate(got.String()); err != nil || back != got {
			t.Errorf("ParseRate(%q.String() = %q) = %v, %v; want %v", in, got.String(), back, err, got)
		}
	}
	for _, in := range []string{"", "10", "10/d", "0/s", "-1/s", "x/s", "10/1us", "10/25h", "10/1.5ms"} {
		if _, err := lanes.ParseRate(in); !errors.Is(err, lanes.ErrInvalid) {
			t.Errorf("ParseRate(%q) = %v; want ErrInvalid", in, err)
		}
	}
}

// A cost is refused at request time when no grant could ever spend it.
func TestRequestValidateRate(t *testing.T) {
	r := lanes.Rate{Limit: 5, Per: time.Second}
	for _, tc := range []struct {
		lane  lanes.Lane
		field string // "" when valid
	}{
		{lanes.Lane{Key: "k", Rate: r}, ""},
		{lanes.Lane{Key: "k", Limit: 2, Rate: r, Cost: 5}, ""},
		{lanes.Lane{Key: "k", Rate: r, Cost: 6}, "cost"},
		{lanes.Lane{Key: "k", Rate: r, Cost: -1}, "cost"},
		{lanes.Lane{Key: "k", Limit: 1, Cost: 2}, "cost"},
		{lanes.Lane{Key: "k", Rate: lanes.Rate{Limit: 5}}, "rate"},
		{lanes.Lane{Key: "k", Rate: lanes.Rate{Per: time.Second}}, "rate"},
	} {
		err := lanes.Request{ID: "a", Lanes: []lanes.Lane{tc.lane}}.Validate()
		var inv *lanes.InvalidError
		switch {
		case tc.field == "" && err != nil:
			t.Errorf("Validate(%+v) = %v; want nil", tc.lane, err)
		case tc.field != "" && (!errors.As(err, &inv) || inv.Field != tc.field):
			t.Errorf("Validate(%+v) = %v; want an InvalidError on %s", tc.lane, err, tc.field)
		}
	}
}
