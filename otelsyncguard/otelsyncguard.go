// Package otelsyncguard reports syncguard locks to OpenTelemetry: metrics
// for acquire attempts, waits, holdings, extensions, releases and lost
// locks, and a client span for every backend operation, nested under the
// caller's span (and so beside the SQL spans of an instrumented driver).
//
//	locks, err := syncguard.New(db, nil)
//	observed := otelsyncguard.Wrap(locks) // global MeterProvider and TracerProvider
//	err = observed.WithLock(ctx, "jobs:nightly-report", fn, opts)
//
// Wrap returns a *Backend, a syncguard.LockBackend: use it wherever the
// wrapped backend was used. It forwards the queue of a *syncguard.Backend
// (syncguard.Queuer), so Lock and WithLock on it wait in the key's queue,
// each attempt in a span. The metrics of Lock and WithLock (wait, hold,
// losses, locks held) are recorded both for syncguard.Lock(ctx, observed,
// ...) and for the Backend's own Lock and WithLock methods; the methods add
// a span for the whole wait and holding, with the attempts counted
// (through LockOptions.OnAttempt, which still gets them).
//
// The package uses only syncguard's exported API: the metrics come from
// syncguard.WithTelemetry's events (LockEvent, matched by type with
// syncguard.EventAcquire and the others; the loss reason from
// LockEvent.LossReason), and Backend.Unwrap returns that
// syncguard.TelemetryBackend, through which syncguard.Lock finds where to
// report (syncguard.As).
//
// The module depends only on the OpenTelemetry API: the application picks
// the SDK and exporter. Attribute names are the semantic conventions'
// (go.opentelemetry.io/otel/semconv: db.system.name, db.operation.name,
// error.type) and this package's exported keys (AttrOutcome,
// AttrLockLabel, ...), to filter on. Lock keys never become attributes
// unless WithKeyLabel maps them to a bounded label. Metric names, units
// and attributes are listed in docs/observability.md.
package otelsyncguard

import (
	"context"
	"runtime/debug"
	"sync"
	"time"

	"github.com/syncguard/syncguard-go/syncguard"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of the meter and the tracer: the
// module path.
const ScopeName = "github.com/syncguard/syncguard-go/otelsyncguard"

// Version returns the version of this module as the build recorded it
// (for example "v0.2.0"), or "" in a build without module information
// (a development checkout, go run of a file). It is the instrumentation
// scope's version.
func Version() string { return version() }

var version = sync.OnceValue(func() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	if info.Main.Path == ScopeName && info.Main.Version != "(devel)" {
		return info.Main.Version
	}
	for _, d := range info.Deps {
		if d.Path == ScopeName {
			if d.Replace != nil && d.Replace.Version != "" {
				return d.Replace.Version
			}
			if d.Version != "(devel)" {
				return d.Version
			}
		}
	}
	return ""
})

// An Option configures Wrap.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	mp       metric.MeterProvider
	tp       trace.TracerProvider
	attrs    []attribute.KeyValue
	keyLabel func(string) string
	onEvent  func(syncguard.LockEvent)
}

// WithMeterProvider sets the MeterProvider. Default: otel.GetMeterProvider()
// at the time of Wrap (the global one, which forwards to the provider set
// later with otel.SetMeterProvider).
func WithMeterProvider(mp metric.MeterProvider) Option {
	return optionFunc(func(c *config) { c.mp = mp })
}

// WithTracerProvider sets the TracerProvider. Default:
// otel.GetTracerProvider() at the time of Wrap.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return optionFunc(func(c *config) { c.tp = tp })
}

// WithAttributes adds attrs to every measurement and span, for example the
// name of the database or of the pool.
func WithAttributes(attrs ...attribute.KeyValue) Option {
	return optionFunc(func(c *config) { c.attrs = append(c.attrs, attrs...) })
}

// WithKeyLabel maps each lock key to a label, recorded as the attribute
// syncguard.lock.label (AttrLockLabel) on the measurements and spans that
// concern a key (acquire attempts, waits, holdings, locks held, losses; not
// extends or releases, which name only a lockId). label must return few distinct
// values (a job name, say, never an id): each one is a time series of
// every metric. An empty label adds no attribute. Default: keys are never
// recorded.
func WithKeyLabel(label func(key string) string) Option {
	return optionFunc(func(c *config) { c.keyLabel = label })
}

// WithOnEvent also passes every syncguard.LockEvent to onEvent (for
// example syncguard.SlogSink), without raw keys or lockIds, on the same
// goroutine that records the metrics. A backend has one telemetry hook;
// this is how logging shares it.
func WithOnEvent(onEvent func(syncguard.LockEvent)) Option {
	return optionFunc(func(c *config) { c.onEvent = onEvent })
}

// Backend is a syncguard.LockBackend that records metrics and spans for the
// backend it wraps. Make one with Wrap.
//
// Metrics are recorded from the syncguard.LockEvent of each operation, on
// the wrapper's telemetry goroutine, not on the caller's path (see
// syncguard.WithTelemetry: events are delivered in batches, at most 10 ms
// after the operation; Flush waits for them, before the MeterProvider's
// Shutdown at exit and in tests; Dropped counts events lost to a full
// buffer). The span of a backend operation is started and ended on the
// caller's goroutine, with the caller's ctx: it has ended when the
// operation returns, and needs no Flush.
//
// A Backend is a syncguard.Queuer when the wrapped backend is one (a
// *syncguard.Backend on a pool): Lock and WithLock keep their place in the
// key's queue through it, each attempt in a span "syncguard.acquire".
// Unwrap returns the syncguard.TelemetryBackend that makes its events, so
// that syncguard.Lock and WithLock find through it (syncguard.As) where to
// report their waits and holdings, and the wrapped backend's release
// timeout and lease logger.
type Backend struct {
	tb        *syncguard.TelemetryBackend
	tracer    trace.Tracer
	spanAttrs []attribute.KeyValue // db.system.name and WithAttributes
	ops       opSpans
	keyLabel  func(string) string
	m         *metrics
	reg       metric.Registration
	closeOnce sync.Once
}

var (
	_ syncguard.LockBackend = (*Backend)(nil)
	_ syncguard.Queuer      = (*Backend)(nil)
)

// Wrap returns a Backend that records metrics and spans for backend.
// backend is usually a *syncguard.Backend; any LockBackend works (the
// polling metric syncguard.wait.polling needs a backend with
// NotificationStatus, such as *syncguard.Backend, found through wrappers
// with syncguard.As).
func Wrap(backend syncguard.LockBackend, opts ...Option) *Backend {
	var c config
	for _, o := range opts {
		o.apply(&c)
	}
	if c.mp == nil {
		c.mp = otel.GetMeterProvider()
	}
	if c.tp == nil {
		c.tp = otel.GetTracerProvider()
	}
	b := &Backend{
		tracer:    c.tp.Tracer(ScopeName, trace.WithInstrumentationVersion(Version())),
		spanAttrs: append([]attribute.KeyValue{dbSystem}, c.attrs...),
		keyLabel:  c.keyLabel,
	}
	b.ops = newOpSpans(b.spanAttrs)
	b.m = newMetrics(c.mp.Meter(ScopeName, metric.WithInstrumentationVersion(Version())), c)
	b.tb = syncguard.WithTelemetry(backend, syncguard.TelemetryOptions{
		OnEvent:    b.m.record,
		IncludeRaw: c.keyLabel != nil,
	})
	ns, _ := syncguard.As[notificationStatuser](backend)
	b.reg = b.m.observe(b.tb, ns)
	return b
}

// Unwrap returns the syncguard.TelemetryBackend around the wrapped backend
// that reports each operation to the metrics. syncguard.As finds the
// capabilities of the wrapped backend through it.
func (b *Backend) Unwrap() syncguard.LockBackend { return b.tb }

// Flush waits until the metrics of the events queued so far are recorded,
// or ctx is done (syncguard.TelemetryBackend.Flush). Call it at exit
// before the MeterProvider's Shutdown, and in tests before collecting.
// Spans need no Flush.
func (b *Backend) Flush(ctx context.Context) error { return b.tb.Flush(ctx) }

// Dropped returns how many events were dropped because the wrapper's
// buffer was full: the metrics miss them (also observed as
// syncguard.telemetry.dropped).
func (b *Backend) Dropped() uint64 { return b.tb.Dropped() }

// Capabilities implements syncguard.LockBackend: the wrapped backend's.
func (b *Backend) Capabilities() syncguard.Capabilities { return b.tb.Capabilities() }

// LookupKeyDebug is LookupKeyDebug of the wrapped backend (a
// *syncguard.Backend has it; any other fails with ErrInvalidArgument),
// counted as a lookup. It returns the raw key and lockId: for debugging
// only.
func (b *Backend) LookupKeyDebug(ctx context.Context, key string) (*syncguard.LockInfoDebug, error) {
	return b.tb.LookupKeyDebug(ctx, key)
}

// LookupIDDebug is LookupKeyDebug by lockId.
func (b *Backend) LookupIDDebug(ctx context.Context, lockID string) (*syncguard.LockInfoDebug, error) {
	return b.tb.LookupIDDebug(ctx, lockID)
}

// Close stops the observable metrics of this wrapper (syncguard.wait.polling,
// syncguard.telemetry.dropped), so that a discarded wrapper is not kept by
// the MeterProvider. It does not close the wrapped backend, and the wrapper
// keeps working. It returns the MeterProvider's error, if any.
func (b *Backend) Close() error {
	var err error
	b.closeOnce.Do(func() {
		if b.reg != nil {
			err = b.reg.Unregister()
		}
	})
	return err
}

// label returns the syncguard.lock.label attribute of key, if any.
func (b *Backend) label(key string) (attribute.KeyValue, bool) {
	if b.keyLabel == nil || key == "" {
		return attribute.KeyValue{}, false
	}
	l := safeLabel(b.keyLabel, key)
	if l == "" {
		return attribute.KeyValue{}, false
	}
	return AttrLockLabel.String(l), true
}

// safeLabel calls label, treating a panic as no label.
func safeLabel(label func(string) string, key string) (l string) {
	defer func() {
		if recover() != nil {
			l = ""
		}
	}()
	return label(key)
}

// notificationStatuser is *syncguard.Backend's NotificationStatus.
type notificationStatuser interface {
	NotificationStatus(ctx context.Context) syncguard.NotificationStatus
}

// pollingWindow is how long after the last contended attempt the polling
// metric is observed: the Backend's LISTEN connection closes itself 30 s
// after the last wait, and asking for the status of a backend nobody
// waits on would open one.
const pollingWindow = 30 * time.Second
