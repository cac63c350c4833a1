package otelsyncguard

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/syncguard/syncguard-go/syncguard"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Outcomes (syncguard.outcome; see AttrOutcome).
const (
	outcomeAcquired, outcomeContended, outcomeError = "acquired", "contended", "error"
	outcomeOK, outcomeFailed                        = "ok", "failed"
	outcomeTimeout, outcomeCancelled                = "timeout", "cancelled"
	outcomeReleased, outcomeLost                    = "released", "lost"
)

// lossValues are the syncguard.loss.reason of TraceLock.LossReason: its
// "not-extended" is not_extended, as dashboards and alerts read it.
var lossValues = map[string]string{"not-extended": "not_extended", "expired": "expired", "gone": "gone"}

const lossUnknown = "unknown"

func lossValue(reason string) string {
	if v, ok := lossValues[reason]; ok {
		return v
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
	attempts, extends, releases, losses metric.Int64Counter
	acquireDur, waitDur, holdDur        metric.Float64Histogram
	held                                metric.Int64UpDownCounter
	polling                             metric.Int64ObservableGauge
	dropped                             metric.Int64ObservableCounter
	meter                               metric.Meter

	base, spanBase []attribute.KeyValue // WithAttributes; db.system.name and WithAttributes

	mu   sync.Mutex
	sets map[setKey]*measure
	ns   notificationStatuser // of the last contended attempt's backend

	lastContended atomic.Int64 // UnixNano of the last contended attempt or wait
}

func newMetrics(meter metric.Meter, c config, spanBase []attribute.KeyValue) *metrics {
	m := &metrics{meter: meter, base: c.attrs, spanBase: spanBase, sets: map[setKey]*measure{}}
	var errs [10]error
	m.attempts, errs[0] = meter.Int64Counter("syncguard.acquire.attempts", metric.WithUnit("{attempt}"),
		metric.WithDescription("Acquire attempts (LockBackend.Acquire calls, each attempt of Lock and WithLock), by outcome: acquired, contended or error (error.type: the code)."))
	m.acquireDur, errs[1] = meter.Float64Histogram("syncguard.acquire.duration", metric.WithUnit("s"),
		metric.WithDescription("Duration of acquire attempts, round trip included, by outcome."),
		metric.WithExplicitBucketBoundaries(acquireBuckets...))
	m.waitDur, errs[2] = meter.Float64Histogram("syncguard.wait.duration", metric.WithUnit("s"),
		metric.WithDescription("Time Lock and WithLock waited until the lock was held (acquired) or they gave up (timeout, cancelled, error)."),
		metric.WithExplicitBucketBoundaries(waitBuckets...))
	m.holdDur, errs[3] = meter.Float64Histogram("syncguard.hold.duration", metric.WithUnit("s"),
		metric.WithDescription("Time a lease of Lock or WithLock held its lock, by outcome: released or lost."),
		metric.WithExplicitBucketBoundaries(holdBuckets...))
	m.held, errs[4] = meter.Int64UpDownCounter("syncguard.locks.held", metric.WithUnit("{lock}"),
		metric.WithDescription("Leases of Lock and WithLock holding their lock now."))
	m.extends, errs[5] = meter.Int64Counter("syncguard.extends", metric.WithUnit("{extend}"),
		metric.WithDescription("Extend calls, automatic ones included, by outcome: ok, failed (syncguard.reason: expired or not-found) or error."))
	m.releases, errs[6] = meter.Int64Counter("syncguard.releases", metric.WithUnit("{release}"),
		metric.WithDescription("Release calls, by outcome: ok, failed (syncguard.reason: expired or not-found) or error."))
	m.losses, errs[7] = meter.Int64Counter("syncguard.losses", metric.WithUnit("{loss}"),
		metric.WithDescription("Leases that lost their lock while holding it, by syncguard.loss.reason: expired, not_extended or gone."))
	m.polling, errs[8] = meter.Int64ObservableGauge("syncguard.wait.polling", metric.WithUnit("{backend}"),
		metric.WithDescription("1 when waiting on this backend falls back to polling (no LISTEN connection receives the hand-off notifications), 0 when notified; observed only within 30 s of a contended attempt."))
	m.dropped, errs[9] = meter.Int64ObservableCounter("syncguard.telemetry.dropped", metric.WithUnit("{event}"),
		metric.WithDescription("Always 0: the metrics are recorded on the caller's path, nothing is queued or dropped (kept for existing dashboards)."))
	if err := errors.Join(errs[:]...); err != nil {
		otel.Handle(err)
	}
	return m
}

// observe registers the callback of the observable instruments.
func (m *metrics) observe() metric.Registration {
	base := metric.WithAttributes(m.base...)
	reg, err := m.meter.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		o.ObserveInt64(m.dropped, 0, base)
		m.mu.Lock()
		ns := m.ns
		m.mu.Unlock()
		last := m.lastContended.Load()
		if ns == nil || last == 0 || time.Since(time.Unix(0, last)) > pollingWindow {
			return nil
		}
		// The LISTEN connection is open or opening: the status settles soon.
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
	}
	return reg
}

// setKey names a set of attributes: a span's (op, the operation) or a
// measurement's (op ""). A measure is one as a span's attribute list and
// as the options of Add and Record: made once, recording neither sorts
// nor allocates.
type setKey struct{ label, outcome, reason, code, loss, op string }

type measure struct {
	kv  []attribute.KeyValue
	add []metric.AddOption
	rec []metric.RecordOption
}

// set returns the measure of k: the base attributes (of a span: with
// db.system.name and db.operation.name) plus those of k that are set.
func (m *metrics) set(k setKey) *measure {
	m.mu.Lock()
	defer m.mu.Unlock()
	if o, ok := m.sets[k]; ok {
		return o
	}
	kv := append(make([]attribute.KeyValue, 0, len(m.spanBase)+6), m.base...)
	if k.op != "" {
		kv = append(append(kv[:0], m.spanBase...), attrOperation.String(k.op))
	}
	for i, v := range [...]string{k.label, k.outcome, k.reason, k.code, k.loss} {
		if v != "" {
			kv = append(kv, [...]attribute.Key{AttrLockLabel, AttrOutcome, AttrReason, attrErrorType, AttrLossReason}[i].String(v))
		}
	}
	o := metric.WithAttributeSet(attribute.NewSet(kv...))
	s := &measure{kv: kv, add: []metric.AddOption{o}, rec: []metric.RecordOption{o}}
	if len(m.sets) < 4096 { // labels are bounded; this only guards a mistake
		m.sets[k] = s
	}
	return s
}

func errorType(err error) string {
	if c := syncguard.CodeOf(err); c != "" {
		return string(c)
	}
	return errorTypeOther
}
