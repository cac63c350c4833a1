package otelsyncguard

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/syncguard/syncguard-go/election"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// ElectionMetrics reports one candidate of an election, from its
// election.Options.OnStatus: syncguard.election.leader (gauge, {leader}: 1
// while it leads, 0 otherwise, from its first campaign on),
// syncguard.election.term (gauge, {term}: the newest term it saw, once it
// saw one) and syncguard.election.changes (counter, {change}: the new
// terms it saw after the first), each with syncguard.election.name (unless
// "") and WithAttributes' attributes, observed at each collection. Make
// one per Election and Close it when the election is discarded:
//
//	em := otelsyncguard.NewElectionMetrics("billing-leader")
//	defer em.Close()
//	e, err := election.New(locks, "billing:leader", &election.Options{OnStatus: em.OnStatus})
//
// docs/observability.md has the alerts they drive.
type ElectionMetrics struct {
	started atomic.Bool  // a status was reported: the candidate campaigns
	leader  atomic.Int64 // 1 or 0
	term    atomic.Int64 // 0 until a term is seen
	changes atomic.Int64

	mu  sync.Mutex // serializes OnStatus's read-modify-write of term
	reg metric.Registration
}

// NewElectionMetrics registers the metrics of one election candidate with
// the MeterProvider of opts (WithMeterProvider; default the global one),
// with name as syncguard.election.name: a bounded name of the election
// (never a key holding ids). Of the options, only WithMeterProvider and
// WithAttributes apply.
func NewElectionMetrics(name string, opts ...Option) *ElectionMetrics {
	var c config
	for _, o := range opts {
		o(&c)
	}
	if c.mp == nil {
		c.mp = otel.GetMeterProvider()
	}
	kv := append([]attribute.KeyValue(nil), c.attrs...)
	if name != "" {
		kv = append(kv, AttrElectionName.String(name))
	}
	set := metric.WithAttributeSet(attribute.NewSet(kv...))
	meter := c.mp.Meter(ScopeName, metric.WithInstrumentationVersion(Version()))
	m := &ElectionMetrics{}
	var errs [4]error
	var leader, term metric.Int64ObservableGauge
	var changes metric.Int64ObservableCounter
	leader, errs[0] = meter.Int64ObservableGauge("syncguard.election.leader", metric.WithUnit("{leader}"),
		metric.WithDescription("1 while this candidate leads the election, 0 otherwise, from the start of its first campaign."))
	term, errs[1] = meter.Int64ObservableGauge("syncguard.election.term", metric.WithUnit("{term}"),
		metric.WithDescription("The newest term (fence) of the election this candidate saw: its own, or the current leader's."))
	changes, errs[2] = meter.Int64ObservableCounter("syncguard.election.changes", metric.WithUnit("{change}"),
		metric.WithDescription("Leadership changes this candidate saw: new terms after the first it saw."))
	if err := errors.Join(errs[:]...); err != nil {
		otel.Handle(err)
		return m
	}
	m.reg, errs[3] = meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		if !m.started.Load() {
			return nil
		}
		o.ObserveInt64(leader, m.leader.Load(), set)
		o.ObserveInt64(changes, m.changes.Load(), set)
		if t := m.term.Load(); t > 0 {
			o.ObserveInt64(term, t, set)
		}
		return nil
	}, leader, term, changes)
	if errs[3] != nil {
		otel.Handle(errs[3])
	}
	return m
}

// OnStatus records s: pass it as election.Options.OnStatus.
func (m *ElectionMetrics) OnStatus(s election.Status) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var leader int64
	if s.Leader {
		leader = 1
	}
	m.leader.Store(leader)
	if t, err := s.Term.Int64(); err == nil && t > m.term.Load() {
		if m.term.Load() > 0 {
			m.changes.Add(1)
		}
		m.term.Store(t)
	}
	m.started.Store(true)
}

// Close stops reporting: the candidate's series end. It returns the
// MeterProvider's error, if any.
func (m *ElectionMetrics) Close() error {
	m.mu.Lock()
	reg := m.reg
	m.reg = nil
	m.mu.Unlock()
	if reg == nil {
		return nil
	}
	return reg.Unregister()
}
