package batch

import (
	"regexp"

	"github.com/BurntSushi/toml"

	"github.com/lanes-dev/lanes/lanes"
	"github.com/lanes-dev/lanes/sched"
)

// Rate lanes (issue 15) in TOML: rate = { key = "partner", limit = 60,
// per = "1m" } and cost = N or cost = "{argument}".

// rate decodes { key, limit, per }: every field needed, per a duration
// such as "1s", "1m" or "1h".
func (p *parser) rate(k toml.Key, v toml.Primitive) *sched.Rate {
	var rt rateTOML
	if !p.table(k, v, &rt) {
		return nil
	}
	for _, f := range rateKeys {
		if !p.has(at(k, f)) {
			p.fail(k, `needs key, limit and per: { key = "partner", limit = 60, per = "1m" }`)
			return nil
		}
	}
	key, ok1 := p.string(at(k, "key"), rt.Key)
	limit, ok2 := p.limit(at(k, "limit"), p.value(at(k, "limit"), rt.Limit), 1)
	per, ok3 := p.duration(at(k, "per"), rt.Per)
	if !ok1 || !ok2 || !ok3 {
		return nil
	}
	if key == "" {
		p.fail(at(k, "key"), "is empty")
		return nil
	}
	if err := (lanes.Rate{Limit: limit, Per: per}).Validate(); err != nil {
		p.fail(at(k, "per"), "%q: a window is a whole number of milliseconds from 1ms to %v", per, lanes.MaxRatePer)
		return nil
	}
	return &sched.Rate{Key: key, Limit: limit, Per: per}
}

// costArg is the form of cost = "{argument}".
var costArg = regexp.MustCompile(`^\{([A-Za-z_][A-Za-z0-9_]*)\}$`)

// cost decodes N (at least 1) or "{argument}": the whole number in that
// argument of each call.
func (p *parser) cost(k toml.Key, v toml.Primitive) sched.CostFunc {
	switch x := p.value(k, v).(type) {
	case int64:
		if n, ok := p.limit(k, x, 1); ok {
			return sched.CostOf(n)
		}
	case string:
		m := costArg.FindStringSubmatch(x)
		if m == nil {
			p.fail(k, `%q must be a whole number or "{argument}", the name of a call argument in braces`, x)
			return nil
		}
		return sched.CostFromArgument(m[1])
	case nil:
	default:
		p.fail(k, `must be a whole number or "{argument}", not %s`, describe(x))
	}
	return nil
}
