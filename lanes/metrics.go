package lanes

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/lanes-dev/lanes/internal/otelx"
)

// MetricsOption configures RegisterMetrics.
type MetricsOption func(*metricsConfig) error

type metricsConfig struct {
	exact    map[string]bool // keys reported by name
	prefixes []string        // and every key that starts with one of these
}

// WithRawKeys names the keys that RegisterMetrics reports by name (attribute
// lanes.key) beside their class: each pattern is a key, or a prefix ending
// in "*" ("tenant:*" is every tenant's key; "*" alone is every key, as many
// series as keys). A key named exactly is reported even while idle (as 0).
// Every other key counts only toward its class's series, so the number of
// series stays bounded whatever keys the namespace sees. Give only keys
// whose number you know: file paths or tenants may grow without bound. An
// empty or invalid pattern is an *InvalidError.
func WithRawKeys(patterns ...string) MetricsOption {
	return func(c *metricsConfig) error {
		for _, p := range patterns {
			if prefix, ok := strings.CutSuffix(p, "*"); ok {
				c.prefixes = append(c.prefixes, prefix)
				continue
			}
			if err := ValidateKey(p); err != nil {
				return err
			}
			if c.exact == nil {
				c.exact = map[string]bool{}
			}
			c.exact[p] = true
		}
		return nil
	}
}

// raw reports whether key is reported by name.
func (c *metricsConfig) raw(key string) bool {
	if c.exact[key] {
		return true
	}
	for _, p := range c.prefixes {
		if strings.HasPrefix(key, p) {
			return true
		}
	}
	return false
}

// RegisterMetrics reports the state of b's namespace to mp at each
// collection, every series with the attribute lanes.namespace:
//
//   - lanes.holders ({holder}), lanes.waiters ({waiter}) and
//     lanes.wait.oldest (s: how long the longest waiting head of a queue has
//     waited), gauges per class of key (lanes.key.class: tenant, tool,
//     concurrency, file, lock, run, other; each reported, as 0 when idle),
//     and per key (lanes.key beside its class) for the keys WithRawKeys
//     names, which then count no more toward their class's series: the sum
//     over every series of a class is the class's total;
//   - the backend's counts since the namespace was first used, as
//     counters: lanes.leases.expired ({lease}: holders that crashed or
//     stalled), lanes.waiters.evicted ({entry}), lanes.leases.revoked
//     ({lease}: borrowed leases ended with their lender's) and
//     lanes.state.resets ({reset}: the state was reset because part of it
//     vanished).
//
// Each collection runs one Inspect, bounded by five seconds; unregister the
// returned Registration to stop. The error is an *InvalidError for a bad
// option, or mp's.
func RegisterMetrics(mp metric.MeterProvider, b Backend, opts ...MetricsOption) (metric.Registration, error) {
	var cfg metricsConfig
	for _, o := range opts {
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	m := mp.Meter(ScopeName)
	holders, err1 := m.Int64ObservableGauge("lanes.holders", metric.WithUnit("{holder}"),
		metric.WithDescription("Holders of the keys of a class, or of one key"))
	waiters, err2 := m.Int64ObservableGauge("lanes.waiters", metric.WithUnit("{waiter}"),
		metric.WithDescription("Entries queued for the keys of a class, or for one key"))
	oldest, err3 := m.Float64ObservableGauge("lanes.wait.oldest", metric.WithUnit("s"),
		metric.WithDescription("How long the longest waiting head of a queue of the class (or of the key) has waited"))
	expired, err4 := m.Int64ObservableCounter("lanes.leases.expired", metric.WithUnit("{lease}"),
		metric.WithDescription("Leases that expired: their holders crashed or stalled"))
	evicted, err5 := m.Int64ObservableCounter("lanes.waiters.evicted", metric.WithUnit("{entry}"),
		metric.WithDescription("Waiting entries that expired: their processes died or stalled"))
	revoked, err6 := m.Int64ObservableCounter("lanes.leases.revoked", metric.WithUnit("{lease}"),
		metric.WithDescription("Borrowed leases that ended with the lease they borrowed from"))
	resets, err7 := m.Int64ObservableCounter("lanes.state.resets", metric.WithUnit("{reset}"),
		metric.WithDescription("Times the namespace's state was reset because part of it vanished"))
	if err := errors.Join(err1, err2, err3, err4, err5, err6, err7); err != nil {
		return nil, err
	}
	return m.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		snap, err := b.Inspect(ctx, nil)
		if err != nil {
			return fmt.Errorf("lanes: metrics of namespace %q: %w", namespaceOf(b), err)
		}
		ns := namespaceOf(b)
		if ns == "" {
			ns = snap.Namespace
		}
		nsAttr := AttrNamespace.String(ns)
		for s, v := range cfg.series(snap) {
			at := []attribute.KeyValue{nsAttr, AttrKeyClass.String(s.class)}
			if s.key != "" {
				at = append(at, AttrKey.String(s.key))
			}
			set := metric.WithAttributeSet(attribute.NewSet(at...))
			o.ObserveInt64(holders, int64(v.holders), set)
			o.ObserveInt64(waiters, int64(v.waiters), set)
			o.ObserveFloat64(oldest, v.oldest.Seconds(), set)
		}
		set := metric.WithAttributeSet(attribute.NewSet(nsAttr))
		o.ObserveInt64(expired, int64(snap.Stats.ExpiredHolders), set)
		o.ObserveInt64(evicted, int64(snap.Stats.EvictedWaiters), set)
		o.ObserveInt64(revoked, int64(snap.Stats.Revoked), set)
		o.ObserveInt64(resets, int64(snap.Stats.Resets), set)
		return nil
	}, holders, waiters, oldest, expired, evicted, revoked, resets)
}

// series names one series of the per-key gauges: a class, and a key when
// it is reported by name.
type series struct{ class, key string }

// gauges are the values of one series.
type gauges struct {
	holders, waiters int
	oldest           time.Duration
}

// series sums snap's keys into the series cfg reports: every class, every
// key named exactly, and each other key WithRawKeys allows.
func (c *metricsConfig) series(snap *Snapshot) map[series]gauges {
	out := make(map[series]gauges, len(otelx.Classes)+len(c.exact))
	for _, class := range otelx.Classes {
		out[series{class: class}] = gauges{}
	}
	for k := range c.exact {
		out[series{class: otelx.KeyClass(k), key: k}] = gauges{}
	}
	for _, k := range snap.Keys {
		s := series{class: otelx.KeyClass(k.Key)}
		if c.raw(k.Key) {
			s.key = k.Key
		}
		g := out[s]
		g.holders += len(k.Holders)
		g.waiters += len(k.Waiters)
		if len(k.Waiters) > 0 {
			g.oldest = max(g.oldest, snap.Time.Sub(k.Waiters[0].Enqueued))
		}
		out[s] = g
	}
	return out
}
