// Package otelsyncguard reports syncguard locks to OpenTelemetry: a
// syncguard.Tracer that records metrics (attempts, waits, holdings,
// extends, releases, losses), a client span per backend operation (beside
// the SQL spans of an instrumented driver) and a span per Lock and
// WithLock, whose children are its attempts, its lease's extends and
// release, and fn's spans. All on the caller's path, synchronously.
//
//	tracer := otelsyncguard.New() // global MeterProvider and TracerProvider
//	locks, err := syncguard.New(db, &syncguard.Config{Tracer: tracer})
//
// Attribute names are the semantic conventions' and this package's (Attr
// constants); keys never become attributes unless WithKeyLabel maps them
// to a bounded label. docs/observability.md lists metrics and attributes.
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
// ("v0.2.0"; "" without module information): the scope's version.
func Version() string { return version() }

var version = sync.OnceValue(func() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	for _, d := range append([]*debug.Module{&info.Main}, info.Deps...) {
		if d.Path != ScopeName {
			continue
		}
		if d.Replace != nil && d.Replace.Version != "" {
			return d.Replace.Version
		}
		if d.Version != "(devel)" {
			return d.Version
		}
	}
	return ""
})

// An Option configures New and NewElectionMetrics.
type Option func(*config)

type config struct {
	mp       metric.MeterProvider
	tp       trace.TracerProvider
	attrs    []attribute.KeyValue
	keyLabel func(string) string
}

// WithMeterProvider sets the MeterProvider. Default: the global one
// (otel.GetMeterProvider at New; it forwards to a provider set later).
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) { c.mp = mp }
}

// WithTracerProvider sets the TracerProvider. Default:
// otel.GetTracerProvider() at the time of New.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) { c.tp = tp }
}

// WithAttributes adds attrs to every measurement and span, for example the
// name of the database or of the pool.
func WithAttributes(attrs ...attribute.KeyValue) Option {
	return func(c *config) { c.attrs = append(c.attrs, attrs...) }
}

// WithKeyLabel maps each lock key to a label, the attribute
// syncguard.lock.label (AttrLockLabel) of what concerns a key (attempts,
// waits, holdings, losses; not extends or releases, which name a lockId).
// label must return few distinct values (a job name, never an id): each is
// a time series of every metric. "" (or a panic) adds no attribute.
// Default: keys are never recorded.
func WithKeyLabel(label func(key string) string) Option {
	return func(c *config) { c.keyLabel = label }
}

// Tracer is a syncguard.Tracer that records metrics and spans. Make one
// with New and set it as syncguard.Config.Tracer (or LockOptions.Tracer,
// or syncguardtest's SetTracer); one Tracer may serve several backends.
type Tracer struct {
	tracer   trace.Tracer
	keyLabel func(string) string
	m        *metrics
	close    func() error
}

var _ syncguard.Tracer = (*Tracer)(nil)

// New returns a Tracer. syncguard.wait.polling is observed for the last
// backend with NotificationStatus (syncguard.As) that saw contention.
func New(opts ...Option) *Tracer {
	var c config
	for _, o := range opts {
		o(&c)
	}
	if c.mp == nil {
		c.mp = otel.GetMeterProvider()
	}
	if c.tp == nil {
		c.tp = otel.GetTracerProvider()
	}
	t := &Tracer{tracer: c.tp.Tracer(ScopeName, trace.WithInstrumentationVersion(Version())), keyLabel: c.keyLabel}
	t.m = newMetrics(c.mp.Meter(ScopeName, metric.WithInstrumentationVersion(Version())), c,
		append([]attribute.KeyValue{dbSystem}, c.attrs...))
	reg := t.m.observe()
	t.close = sync.OnceValue(func() error {
		if reg == nil {
			return nil
		}
		return reg.Unregister()
	})
	return t
}

// Close unregisters the observable metrics (syncguard.wait.polling,
// syncguard.telemetry.dropped) from the MeterProvider; the Tracer keeps
// working otherwise.
func (t *Tracer) Close() error { return t.close() }

// label returns the syncguard.lock.label of key ("" for none).
func (t *Tracer) label(key string) (l string) {
	if t.keyLabel == nil || key == "" {
		return ""
	}
	defer func() {
		if recover() != nil {
			l = ""
		}
	}()
	return t.keyLabel(key)
}

// notificationStatuser is *syncguard.Backend's NotificationStatus.
type notificationStatuser interface {
	NotificationStatus(ctx context.Context) syncguard.NotificationStatus
}

// pollingWindow: the polling metric is observed this long after the last
// contention (asking a backend nobody waits on would open a LISTEN).
const pollingWindow = 30 * time.Second
