package batch

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"

	"github.com/google/cel-go/cel"

	"github.com/lanes-dev/lanes/sched"
)

// MaxSafeIfCost bounds the work of one evaluation of a safe_if expression,
// in CEL's cost units (about one per operation): an expression that needs
// more, such as a comprehension over a huge argument, counts as unsafe.
const MaxSafeIfCost = 100_000

// safeIfEnv is the CEL environment of safe_if: one variable, args, the
// call's arguments as JSON gives them (a map for an object; for a tool
// that fans out, the list of its operations).
var safeIfEnv = sync.OnceValues(func() (*cel.Env, error) {
	return cel.NewEnv(cel.Variable("args", cel.DynType))
})

// safeIf compiles the CEL expression src into a SafeFunc (Cogitator's
// isConcurrencySafe(args)). A malformed expression, or one that cannot
// give a boolean, is an error; once compiled, an expression that fails to
// evaluate (a missing argument, a type mismatch, too much work) or gives
// something else than true means unsafe.
func safeIf(src string) (sched.SafeFunc, error) {
	if strings.TrimSpace(src) == "" {
		return nil, errors.New("is empty; write a CEL expression over args, such as args.mode == \"read\"")
	}
	env, err := safeIfEnv()
	if err != nil {
		return nil, err
	}
	ast, iss := env.Compile(src)
	if iss != nil && iss.Err() != nil {
		return nil, fmt.Errorf("is not a valid CEL expression: %v", oneLine(iss.Err().Error()))
	}
	if t := ast.OutputType(); !t.IsExactType(cel.BoolType) && !t.IsExactType(cel.DynType) {
		return nil, fmt.Errorf("gives %s, not a boolean", t)
	}
	prg, err := env.Program(ast, cel.CostLimit(MaxSafeIfCost), cel.InterruptCheckFrequency(100))
	if err != nil {
		return nil, fmt.Errorf("cannot be evaluated: %v", oneLine(err.Error()))
	}
	return func(raw json.RawMessage) (bool, error) {
		args, err := celValue(raw)
		if err != nil {
			return false, err
		}
		out, _, err := prg.Eval(map[string]any{"args": args})
		if err != nil {
			return false, fmt.Errorf("safe_if: %w", err)
		}
		ok, isBool := out.Value().(bool)
		if !isBool {
			return false, fmt.Errorf("safe_if gave %v, not a boolean", out.Value())
		}
		return ok, nil
	}, nil
}

// celValue decodes JSON arguments for CEL: numbers that are whole and
// within 2^53 as int, others as double, so that args.count > 3 and
// args.ratio < 0.5 both read as written.
func celValue(raw json.RawMessage) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("the arguments are not JSON: %w", err)
	}
	return celNumbers(v), nil
}

func celNumbers(v any) any {
	switch x := v.(type) {
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i
		}
		f, _ := x.Float64()
		if f == math.Trunc(f) && math.Abs(f) < 1<<53 {
			return int64(f)
		}
		return f
	case map[string]any:
		for k, e := range x {
			x[k] = celNumbers(e)
		}
	case []any:
		for i, e := range x {
			x[i] = celNumbers(e)
		}
	}
	return v
}
