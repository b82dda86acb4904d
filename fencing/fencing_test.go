package fencing_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"go.uber.org/goleak"

	"github.com/lanes-dev/lanes/fencing"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestParseToken(t *testing.T) {
	tests := []struct {
		in   string
		want fencing.Token
		ok   bool
	}{
		{"1", 1, true},
		{"17", 17, true},
		{"9007199254740993", 9007199254740993, true},
		{"18446744073709551615", math.MaxUint64, true},
		{"", 0, false},
		{"0", 0, false},
		{"-1", 0, false},
		{"+1", 0, false},
		{"abc", 0, false},
		{"07", 0, false},
		{"00", 0, false},
		{" 7", 0, false},
		{"7\n", 0, false},
		{"1.5", 0, false},
		{"1e3", 0, false},
		{"0x10", 0, false},
		{"1_000", 0, false},
		{"18446744073709551616", 0, false},
		{"99999999999999999999999", 0, false},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%q", tt.in), func(t *testing.T) {
			got, err := fencing.ParseToken(tt.in)
			if !tt.ok {
				if !errors.Is(err, fencing.ErrInvalidToken) || !errors.Is(err, fencing.ErrInvalid) {
					t.Fatalf("ParseToken(%q) = %v, %v; want an error wrapping ErrInvalidToken and ErrInvalid", tt.in, got, err)
				}
				if got != 0 {
					t.Errorf("ParseToken(%q) = %v with an error; want 0", tt.in, got)
				}
				if !strings.Contains(err.Error(), fmt.Sprintf("%q", tt.in)) && tt.in != "" {
					t.Errorf("ParseToken(%q) error %q does not quote the input", tt.in, err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("ParseToken(%q) = %v, %v; want %v, nil", tt.in, got, err, tt.want)
			}
			if s := got.String(); s != tt.in {
				t.Errorf("ParseToken(%q).String() = %q; want the input back", tt.in, s)
			}
		})
	}
}

func TestTokenString(t *testing.T) {
	for _, tok := range []fencing.Token{1, 10, 1 << 53, 1<<53 + 1, math.MaxUint64} {
		got, err := fencing.ParseToken(tok.String())
		if err != nil || got != tok {
			t.Errorf("ParseToken(%q) = %v, %v; want %v, nil", tok.String(), got, err, uint64(tok))
		}
	}
	if got := fencing.Token(9007199254740993).String(); got != "9007199254740993" {
		t.Errorf("Token(9007199254740993).String() = %q", got)
	}
}

func TestStaleError(t *testing.T) {
	var err error = &fencing.StaleError{Resource: "orders/7", Token: 7, Highest: 8}
	if !errors.Is(err, fencing.ErrStale) {
		t.Errorf("errors.Is(%v, ErrStale) = false; want true", err)
	}
	if errors.Is(err, fencing.ErrInvalid) {
		t.Errorf("errors.Is(%v, ErrInvalid) = true; want false", err)
	}
	wrapped := errors.Join(errors.New("write failed"), fmt.Errorf("store: %w", err))
	var se *fencing.StaleError
	if !errors.Is(wrapped, fencing.ErrStale) || !errors.As(wrapped, &se) || se.Highest != 8 {
		t.Errorf("wrapped StaleError: errors.Is/As lost it: %v", wrapped)
	}
	for _, want := range []string{`"orders/7"`, "7", "8"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Error() = %q; want it to contain %s", err, want)
		}
	}
}

func TestMemoryGuard(t *testing.T) {
	testGuard(t, suite{newGuard: func(t *testing.T) fencing.Guard {
		return fencing.NewMemoryGuard()
	}})
}

func TestMemoryGuardZeroValue(t *testing.T) {
	var g fencing.MemoryGuard
	if err := g.Check(context.Background(), "r", 3); err != nil {
		t.Fatalf("Check(r, 3) on a zero MemoryGuard = %v; want nil", err)
	}
	if err := g.Check(context.Background(), "r", 2); !errors.Is(err, fencing.ErrStale) {
		t.Fatalf("Check(r, 2) = %v; want ErrStale", err)
	}
}

// suite describes a Guard under test for testGuard.
type suite struct {
	// newGuard returns a guard with no records, cleaned up by t.
	newGuard func(t *testing.T) fencing.Guard
	// shortNames is set when resources longer than a file name (255
	// bytes) cannot be used, as with FileGuard.
	shortNames bool
}

// testGuard is the behaviour every Guard shares.
func testGuard(t *testing.T, s suite) {
	ctx := context.Background()
	accept := func(t *testing.T, g fencing.Guard, res string, tok fencing.Token) {
		t.Helper()
		if err := g.Check(ctx, res, tok); err != nil {
			t.Fatalf("Check(%q, %v) = %v; want nil", res, tok, err)
		}
	}
	refuse := func(t *testing.T, g fencing.Guard, res string, tok, highest fencing.Token) {
		t.Helper()
		err := g.Check(ctx, res, tok)
		if !errors.Is(err, fencing.ErrStale) {
			t.Fatalf("Check(%q, %v) = %v; want ErrStale", res, tok, err)
		}
		var se *fencing.StaleError
		if !errors.As(err, &se) {
			t.Fatalf("Check(%q, %v) = %T; want a *StaleError", res, tok, err)
		}
		want := fencing.StaleError{Resource: res, Token: tok, Highest: highest}
		if *se != want {
			t.Fatalf("Check(%q, %v) = %+v; want %+v", res, tok, *se, want)
		}
		for _, part := range []string{fmt.Sprintf("%q", res), tok.String(), highest.String()} {
			if !strings.Contains(err.Error(), part) {
				t.Errorf("Check(%q, %v) error %q does not name %s", res, tok, err, part)
			}
		}
	}

	t.Run("FirstTokenAccepted", func(t *testing.T) {
		g := s.newGuard(t)
		accept(t, g, "one", 1)
		accept(t, g, "five", 5)
	})
	t.Run("EqualAccepted", func(t *testing.T) {
		g := s.newGuard(t)
		for range 3 {
			accept(t, g, "res", 5)
		}
	})
	t.Run("HigherAccepted", func(t *testing.T) {
		g := s.newGuard(t)
		for _, tok := range []fencing.Token{1, 2, 7, 100, 1 << 40} {
			accept(t, g, "res", tok)
		}
	})
	t.Run("LowerRefused", func(t *testing.T) {
		g := s.newGuard(t)
		accept(t, g, "res", 10)
		refuse(t, g, "res", 9, 10)
		refuse(t, g, "res", 1, 10)
		// A refusal changes nothing: 10 is still accepted, 9 still refused.
		accept(t, g, "res", 10)
		refuse(t, g, "res", 9, 10)
	})
	t.Run("IndependentResources", func(t *testing.T) {
		g := s.newGuard(t)
		accept(t, g, "a", 10)
		accept(t, g, "b", 1)
		refuse(t, g, "a", 9, 10)
		accept(t, g, "b", 2)
		accept(t, g, "c", 1)
		refuse(t, g, "b", 1, 2)
	})
	t.Run("ExactBeyondDoubles", func(t *testing.T) {
		// Each pair: lo < hi, compared on a resource of its own. Several
		// are equal as doubles; others differ in length or in one half
		// of a 20-digit string.
		pairs := []struct{ lo, hi fencing.Token }{
			{1, 2},
			{9, 10},
			{99, 100},
			{9999999999, 10000000000},
			{10000000001, 20000000000},
			{19999999999, 20000000000},
			{1 << 53, 1<<53 + 1},
			{1<<53 + 1, 1<<53 + 2},
			{9007199254740992, 9007199254740993},
			{1<<63 - 1, 1 << 63},
			{9999999999999999999, 10000000000000000000},
			{12345678901234567890, 12345678901234567891},
			{math.MaxUint64 - 1, math.MaxUint64},
		}
		g := s.newGuard(t)
		for i, p := range pairs {
			res := fmt.Sprintf("pair-%d", i)
			accept(t, g, res, p.lo)
			accept(t, g, res, p.hi)
			refuse(t, g, res, p.lo, p.hi)
			accept(t, g, res, p.hi)
		}
	})
	t.Run("BadInput", func(t *testing.T) {
		g := s.newGuard(t)
		long := strings.Repeat("r", fencing.MaxResourceLen+1)
		for _, res := range []string{"", "a\x00b", "\x00", long} {
			if err := g.Check(ctx, res, 1); !errors.Is(err, fencing.ErrInvalid) || errors.Is(err, fencing.ErrInvalidToken) {
				t.Errorf("Check(%.20q, 1) = %v; want ErrInvalid (not ErrInvalidToken)", res, err)
			}
		}
		err := g.Check(ctx, "res", 0)
		if !errors.Is(err, fencing.ErrInvalidToken) || !errors.Is(err, fencing.ErrInvalid) {
			t.Errorf("Check(res, 0) = %v; want ErrInvalidToken", err)
		}
		// Nothing was recorded by the refusals.
		accept(t, g, "res", 1)
		if !s.shortNames {
			accept(t, g, strings.Repeat("r", fencing.MaxResourceLen), 1)
		}
	})
	t.Run("CanceledContext", func(t *testing.T) {
		g := s.newGuard(t)
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if err := g.Check(cctx, "res", 5); !errors.Is(err, context.Canceled) {
			t.Fatalf("Check(canceled ctx, res, 5) = %v; want context.Canceled", err)
		}
		accept(t, g, "res", 1) // 5 was not recorded
	})
	t.Run("Concurrent", func(t *testing.T) {
		testConcurrent(t, s.newGuard(t))
	})
}

// op is one Check of testConcurrent. start and end are readings of a shared
// counter taken just before the call and just after it returned: when
// a.end < b.start, a returned before b was called.
type op struct {
	tok        fencing.Token
	start, end int64
	err        error
}

// testConcurrent runs Check from 16 goroutines with random, climbing tokens
// across 2^53 on one resource and checks that the outcomes can be explained by some
// order of the calls that respects real time (linearizability): an accepted
// token is never lower than one accepted by a call that had returned before
// it was made, and a refusal names a highest that a call made before the
// refusal returned had really been accepted with.
func testConcurrent(t *testing.T, g fencing.Guard) {
	const (
		workers = 16
		perG    = 40
		base    = fencing.Token(1<<53 - 100)
		res     = "shared"
	)
	ctx := context.Background()
	var clock, issued atomic.Int64
	results := make([][]op, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for range perG {
				// Like grants, tokens climb, but each holder may come
				// late by up to 7 grants: many are accepted, many
				// refused.
				tok := base + fencing.Token(issued.Add(1)) - fencing.Token(rand.N(8))
				start := clock.Add(1)
				err := g.Check(ctx, res, tok)
				end := clock.Add(1)
				results[w] = append(results[w], op{tok, start, end, err})
			}
		})
	}
	wg.Wait()

	var accepted, refused []op
	var highest fencing.Token
	for _, ops := range results {
		for _, o := range ops {
			highest = max(highest, o.tok)
			var se *fencing.StaleError
			switch {
			case o.err == nil:
				accepted = append(accepted, o)
			case errors.As(o.err, &se) && se.Resource == res && se.Token == o.tok && se.Highest > o.tok:
				refused = append(refused, o)
			default:
				t.Fatalf("Check(%q, %v) = %v; want nil or a consistent *StaleError", res, o.tok, o.err)
			}
		}
	}
	if len(accepted) == 0 {
		t.Fatal("no Check was accepted")
	}
	for _, b := range accepted {
		for _, a := range accepted {
			if a.end < b.start && b.tok < a.tok {
				t.Errorf("token %v accepted after token %v had been accepted", b.tok, a.tok)
			}
		}
	}
	for _, r := range refused {
		var se *fencing.StaleError
		errors.As(r.err, &se)
		h := se.Highest
		found := false
		for _, a := range accepted {
			if a.tok == h && a.start < r.end {
				found = true
			}
			if r.end < a.start && a.tok < h {
				t.Errorf("token %v accepted after token %v was refused because of %v", a.tok, r.tok, h)
			}
		}
		if !found {
			t.Errorf("token %v refused because of %v, which no earlier Check was accepted with", r.tok, h)
		}
	}
	// The final highest is the highest token submitted.
	if err := g.Check(ctx, res, highest); err != nil {
		t.Errorf("Check(%q, %v) after the race = %v; want nil (the highest submitted)", res, highest, err)
	}
	var se *fencing.StaleError
	if err := g.Check(ctx, res, highest-1); !errors.As(err, &se) || se.Highest != highest {
		t.Errorf("Check(%q, %v) after the race = %v; want a StaleError with Highest %v", res, highest-1, err, highest)
	}
	t.Logf("%d accepted, %d refused", len(accepted), len(refused))
}
