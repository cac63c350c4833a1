package otelsyncguard

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/syncguard/syncguard-go/syncguard"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Outcomes (syncguard.outcome).
const (
	outcomeAcquired  = "acquired"  // acquire attempt, wait
	outcomeContended = "contended" // acquire attempt
	outcomeError     = "error"     // acquire attempt, wait, extend, release
	outcomeOK        = "ok"        // extend, release
	outcomeFailed    = "failed"    // extend, release: the lock was not there
	outcomeReleased  = "released"  // hold
	outcomeLost      = "lost"      // hold
	// wait: also "timeout" and "cancelled", the LockEvent's Reason.
)

// Loss reasons (syncguard.loss.reason). The words predate the core's
// LockEvent.LossReason, whose "not-extended" is written not_extended here,
// as dashboards and alerts already read it.
const (
	lossExpired     = "expired"      // an extend, or the release, found the lock expired
	lossNotExtended = "not_extended" // no extend succeeded before the guaranteed lifetime ran out
	lossGone        = "gone"         // released through its lockId elsewhere, deleted, or taken over
	lossUnknown     = "unknown"
)

// lossValue is the syncguard.loss.reason of a "hold" event's
// LockEvent.LossReason.
func lossValue(reason string) string {
	switch reason {
	case "not-extended":
		return lossNotExtended
	case "expired":
		return lossExpired
	case "gone":
		return lossGone
	}
	return lossUnknown
}

// Histogram bucket boundaries, in seconds.
var (
	acquireBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5}
	waitBuckets    = []float64{0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}
	holdBuckets    = []float64{0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 1800, 3600, 14400}
)

type metrics struct {
	attempts   metric.Int64Counter
	acquireDur metric.Float64Histogram
	waitDur    metric.Float64Histogram
	holdDur    metric.Float64Histogram
	held       metric.Int64UpDownCounter
	extends    metric.Int64Counter
	releases   metric.Int64Counter
	losses     metric.Int64Counter
	polling    metric.Int64ObservableGauge
	dropped    metric.Int64ObservableCounter
	meter      metric.Meter

	base      []attribute.KeyValue
	labelFunc func(string) string
	onEvent   func(syncguard.LockEvent)

	// Used only on the telemetry goroutine (one at a time per wrapper).
	sets map[setKey]*measure
	// failedRelease remembers the lockIds (hashes) whose release found the
	// lock expired or gone, until the lease's "hold" event: that holding
	// lost its lock too.
	failedRelease map[string]string

	lastContended atomic.Int64 // UnixNano of the last contended attempt or wait
}

type setKey struct{ outcome, reason, code, label string }

func newMetrics(meter metric.Meter, c config) *metrics {
	m := &metrics{
		meter: meter, base: c.attrs, labelFunc: c.keyLabel, onEvent: c.onEvent,
		sets: map[setKey]*measure{}, failedRelease: map[string]string{},
	}
	var err error
	handle := func(e error) {
		if e != nil && err == nil {
			err = e
		}
	}
	var e error
	m.attempts, e = meter.Int64Counter("syncguard.acquire.attempts", metric.WithUnit("{attempt}"),
		metric.WithDescription("Acquire attempts (LockBackend.Acquire calls, each attempt of Lock and WithLock), by outcome: acquired, contended or error (error.type: the code)."))
	handle(e)
	m.acquireDur, e = meter.Float64Histogram("syncguard.acquire.duration", metric.WithUnit("s"),
		metric.WithDescription("Duration of acquire attempts, round trip included, by outcome."),
		metric.WithExplicitBucketBoundaries(acquireBuckets...))
	handle(e)
	m.waitDur, e = meter.Float64Histogram("syncguard.wait.duration", metric.WithUnit("s"),
		metric.WithDescription("Time Lock and WithLock waited until the lock was held (acquired) or they gave up (timeout, cancelled, error)."),
		metric.WithExplicitBucketBoundaries(waitBuckets...))
	handle(e)
	m.holdDur, e = meter.Float64Histogram("syncguard.hold.duration", metric.WithUnit("s"),
		metric.WithDescription("Time a lease of Lock or WithLock held its lock, by outcome: released or lost."),
		metric.WithExplicitBucketBoundaries(holdBuckets...))
	handle(e)
	m.held, e = meter.Int64UpDownCounter("syncguard.locks.held", metric.WithUnit("{lock}"),
		metric.WithDescription("Leases of Lock and WithLock holding their lock now."))
	handle(e)
	m.extends, e = meter.Int64Counter("syncguard.extends", metric.WithUnit("{extend}"),
		metric.WithDescription("Extend calls, automatic ones included, by outcome: ok, failed (syncguard.reason: expired or not-found) or error."))
	handle(e)
	m.releases, e = meter.Int64Counter("syncguard.releases", metric.WithUnit("{release}"),
		metric.WithDescription("Release calls, by outcome: ok, failed (syncguard.reason: expired or not-found) or error."))
	handle(e)
	m.losses, e = meter.Int64Counter("syncguard.losses", metric.WithUnit("{loss}"),
		metric.WithDescription("Leases that lost their lock while holding it, by syncguard.loss.reason: expired, not_extended or gone."))
	handle(e)
	m.polling, e = meter.Int64ObservableGauge("syncguard.wait.polling", metric.WithUnit("{backend}"),
		metric.WithDescription("1 when waiting on this backend falls back to polling (no LISTEN connection receives the hand-off notifications), 0 when notified; observed only within 30 s of a contended attempt."))
	handle(e)
	m.dropped, e = meter.Int64ObservableCounter("syncguard.telemetry.dropped", metric.WithUnit("{event}"),
		metric.WithDescription("Telemetry events dropped because the wrapper's buffer was full: the other metrics miss them."))
	handle(e)
	if err != nil {
		otel.Handle(err)
	}
	return m
}

// observe registers the callback of the observable instruments.
func (m *metrics) observe(t *syncguard.TelemetryBackend, ns notificationStatuser) metric.Registration {
	base := metric.WithAttributes(m.base...)
	reg, err := m.meter.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		o.ObserveInt64(m.dropped, int64(t.Dropped()), base)
		last := m.lastContended.Load()
		if ns == nil || last == 0 || time.Since(time.Unix(0, last)) > pollingWindow {
			return nil
		}
		// The LISTEN connection is open or being opened for the waiters:
		// the status is at hand, or settles within the bound.
		ctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		var v int64
		if !ns.NotificationStatus(ctx).Active {
			v = 1
		}
		o.ObserveInt64(m.polling, v, base)
		return nil
	}, m.dropped, m.polling)
	if err != nil {
		otel.Handle(err)
		return nil
	}
	return reg
}

// A measure is the attributes of measurements (the base attributes plus
// an outcome, reason, code or label), as the option slices of Add and
// Record: passing a slice that already exists spares the variadic call
// its allocation.
type measure struct {
	add []metric.AddOption
	rec []metric.RecordOption
}

func newMeasure(kv []attribute.KeyValue) *measure {
	o := metric.WithAttributeSet(attribute.NewSet(kv...))
	return &measure{add: []metric.AddOption{o}, rec: []metric.RecordOption{o}}
}

// set returns the measure of the base attributes plus these.
func (m *metrics) set(outcome, reason, code, label string) *measure {
	k := setKey{outcome, reason, code, label}
	if o, ok := m.sets[k]; ok {
		return o
	}
	kv := append(make([]attribute.KeyValue, 0, len(m.base)+4), m.base...)
	if outcome != "" {
		kv = append(kv, AttrOutcome.String(outcome))
	}
	if reason != "" {
		kv = append(kv, AttrReason.String(reason))
	}
	if code != "" {
		kv = append(kv, attrErrorType.String(code))
	}
	if label != "" {
		kv = append(kv, AttrLockLabel.String(label))
	}
	o := newMeasure(kv)
	if len(m.sets) < 4096 { // labels are bounded; this only guards a mistake
		m.sets[k] = o
	}
	return o
}

func lossSet(m *metrics, why, label string) *measure {
	// The loss reason rides in the reason slot under its own key.
	k := setKey{"", "loss:" + why, "", label}
	if o, ok := m.sets[k]; ok {
		return o
	}
	kv := append(make([]attribute.KeyValue, 0, len(m.base)+2), m.base...)
	kv = append(kv, AttrLossReason.String(why))
	if label != "" {
		kv = append(kv, AttrLockLabel.String(label))
	}
	o := newMeasure(kv)
	if len(m.sets) < 4096 {
		m.sets[k] = o
	}
	return o
}

func errorType(err error) string {
	if err == nil {
		return ""
	}
	if c := syncguard.CodeOf(err); c != "" {
		return string(c)
	}
	return errorTypeOther
}

// record is the wrapper's OnEvent: it runs on the telemetry goroutine.
func (m *metrics) record(e syncguard.LockEvent) {
	ctx := context.Background()
	label := m.label(e.Key) // "" without WithKeyLabel: the raw key is never recorded
	switch e.Type {
	case syncguard.EventAcquire:
		outcome, code := outcomeAcquired, ""
		switch {
		case e.Err != nil:
			outcome, code = outcomeError, errorType(e.Err)
		case !e.OK:
			outcome = outcomeContended
			m.lastContended.Store(time.Now().UnixNano())
		}
		o := m.set(outcome, "", code, label)
		m.attempts.Add(ctx, 1, o.add...)
		m.acquireDur.Record(ctx, e.Duration.Seconds(), o.rec...)
	case syncguard.EventWait:
		outcome, code := outcomeAcquired, ""
		if !e.OK {
			outcome = e.Reason
			if e.Reason == outcomeError {
				code = errorType(e.Err)
			}
		}

		m.waitDur.Record(ctx, e.Duration.Seconds(), m.set(outcome, "", code, label).rec...)
		if e.OK {
			m.held.Add(ctx, 1, m.set("", "", "", label).add...)
		}
		if e.Attempts > 1 {
			m.lastContended.Store(time.Now().UnixNano())
		}
	case syncguard.EventHold:

		outcome := outcomeReleased
		why := ""
		if !e.OK {
			outcome, why = outcomeLost, lossValue(e.LossReason)
		} else if r, ok := m.failedRelease[e.LockIDHash]; ok {
			// Released, but the release found the lock expired or gone:
			// the holding had lost it.
			outcome, why = outcomeLost, r
		}
		delete(m.failedRelease, e.LockIDHash)
		m.holdDur.Record(ctx, e.Duration.Seconds(), m.set(outcome, "", "", label).rec...)
		m.held.Add(ctx, -1, m.set("", "", "", label).add...)
		if why != "" {
			m.losses.Add(ctx, 1, lossSet(m, why, label).add...)
		}
	case syncguard.EventExtend:
		m.extends.Add(ctx, 1, m.set(resultOutcome(e), e.Reason, errorType(e.Err), "").add...)
	case syncguard.EventRelease:
		m.releases.Add(ctx, 1, m.set(resultOutcome(e), e.Reason, errorType(e.Err), "").add...)
		if !e.OK && e.Err == nil && e.LockIDHash != "" {
			if len(m.failedRelease) >= 1024 {
				// Releases made outside a lease never get a "hold" event.
				clear(m.failedRelease)
			}
			why := lossGone
			if e.Reason == syncguard.ReasonExpired {
				why = lossExpired
			}
			m.failedRelease[e.LockIDHash] = why
		}
	}
	if m.onEvent != nil {
		e.Key, e.LockID = "", ""
		m.onEvent(e)
	}
}

// label is the label of a raw key ("" without WithKeyLabel).
func (m *metrics) label(key string) string {
	if key == "" || m.labelFunc == nil {
		return ""
	}
	return safeLabel(m.labelFunc, key)
}

func resultOutcome(e syncguard.LockEvent) string {
	switch {
	case e.Err != nil:
		return outcomeError
	case e.OK:
		return outcomeOK
	}
	return outcomeFailed
}
