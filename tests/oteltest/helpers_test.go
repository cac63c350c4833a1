package oteltest

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/syncguard/syncguard-go/otelsyncguard"
	"github.com/syncguard/syncguard-go/syncguard"
	"github.com/syncguard/syncguard-go/syncguardtest"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// rig is a fake backend whose Tracer is otelsyncguard's, with a manual
// reader and a span recorder.
type rig struct {
	*syncguardtest.Backend
	tracer *otelsyncguard.Tracer
	reader *sdkmetric.ManualReader
	spans  *tracetest.SpanRecorder
}

func newRig(t testing.TB, b *syncguardtest.Backend, opts ...otelsyncguard.Option) *rig {
	reader := sdkmetric.NewManualReader()
	spans := tracetest.NewSpanRecorder()
	r := &rig{Backend: b, reader: reader, spans: spans}
	r.tracer = otelsyncguard.New(append([]otelsyncguard.Option{
		otelsyncguard.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))),
		otelsyncguard.WithTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))),
	}, opts...)...)
	b.SetTracer(r.tracer)
	t.Cleanup(func() { r.tracer.Close() })
	return r
}

// WithLock is syncguard.WithLock on the rig's backend.
func (r *rig) WithLock(ctx context.Context, key string, fn func(context.Context, *syncguard.Lease) error, opts *syncguard.LockOptions) error {
	return syncguard.WithLock(ctx, r.Backend, key, fn, opts)
}

// Lock is syncguard.Lock on the rig's backend.
func (r *rig) Lock(ctx context.Context, key string, opts *syncguard.LockOptions) (*syncguard.Lease, error) {
	return syncguard.Lock(ctx, r.Backend, key, opts)
}

// collected is one collection, with lookups by name and attributes.
type collected struct {
	t  testing.TB
	rm metricdata.ResourceMetrics
}

// collect collects the metrics recorded so far.
func (r *rig) collect(t testing.TB) collected {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	return collected{t, rm}
}

func (c collected) metric(name string) (metricdata.Metrics, bool) {
	for _, sm := range c.rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == name {
				return m, true
			}
		}
	}
	return metricdata.Metrics{}, false
}

// matches reports whether set has exactly the attributes of want
// ("key=value" pairs).
func matches(set attribute.Set, want []string) bool {
	return attrString(set) == strings.Join(sortedCopy(want), ",")
}

func sortedCopy(s []string) []string {
	s = append([]string(nil), s...)
	sort.Strings(s)
	return s
}

func attrString(set attribute.Set) string {
	var kv []string
	for _, a := range set.ToSlice() {
		kv = append(kv, string(a.Key)+"="+a.Value.Emit())
	}
	sort.Strings(kv)
	return strings.Join(kv, ",")
}

// int returns the value of the sum (counter, up-down counter, gauge) name
// at exactly the attributes attrs; 0 when there is no such point.
func (c collected) int(name string, attrs ...string) int64 {
	c.t.Helper()
	m, ok := c.metric(name)
	if !ok {
		return 0
	}
	var pts []metricdata.DataPoint[int64]
	switch d := m.Data.(type) {
	case metricdata.Sum[int64]:
		pts = d.DataPoints
	case metricdata.Gauge[int64]:
		pts = d.DataPoints
	default:
		c.t.Fatalf("%s is a %T, not an int64 sum or gauge", name, m.Data)
	}
	for _, p := range pts {
		if matches(p.Attributes, attrs) {
			return p.Value
		}
	}
	return 0
}

// hist returns the histogram point of name at exactly attrs.
func (c collected) hist(name string, attrs ...string) metricdata.HistogramDataPoint[float64] {
	c.t.Helper()
	m, ok := c.metric(name)
	if !ok {
		return metricdata.HistogramDataPoint[float64]{}
	}
	d, ok := m.Data.(metricdata.Histogram[float64])
	if !ok {
		c.t.Fatalf("%s is a %T, not a float64 histogram", name, m.Data)
	}
	for _, p := range d.DataPoints {
		if matches(p.Attributes, attrs) {
			return p
		}
	}
	return metricdata.HistogramDataPoint[float64]{}
}

// dump lists every point, for failure messages.
func (c collected) dump() string {
	var b strings.Builder
	for _, sm := range c.rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					fmt.Fprintf(&b, "%s{%s} %d\n", m.Name, attrString(p.Attributes), p.Value)
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					fmt.Fprintf(&b, "%s{%s} %d\n", m.Name, attrString(p.Attributes), p.Value)
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					fmt.Fprintf(&b, "%s{%s} count=%d sum=%g\n", m.Name, attrString(p.Attributes), p.Count, p.Sum)
				}
			}
		}
	}
	return b.String()
}

func spanAttr(s sdktrace.ReadOnlySpan, key string) (attribute.Value, bool) {
	for _, a := range s.Attributes() {
		if string(a.Key) == key {
			return a.Value, true
		}
	}
	return attribute.Value{}, false
}

var attributeDB = attribute.String("db.namespace", "orders")
