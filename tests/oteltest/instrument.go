package oteltest

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/syncguard/syncguard-go/otelsyncguard"
	"github.com/syncguard/syncguard-go/syncguard"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
)

// A Mode is a benchmark variant: no instrumentation, or otelsyncguard with
// the SDK.
type Mode int

const (
	// Off is the backend without a Tracer.
	Off Mode = iota
	// On is the Tracer with the SDK's metrics (a manual reader) and
	// tracing (every span sampled, batched to an exporter that discards
	// it).
	On
	// MetricsOnly is the Tracer with the SDK's metrics and the no-op
	// tracer provider: a deployment that does not trace these calls.
	MetricsOnly
)

// Modes are the variants every benchmark runs.
var Modes = []Mode{Off, On, MetricsOnly}

// ModesInOrder are the variants in the order the environment variable
// OTELBENCH_ORDER names them (comma-separated off, on, metrics; a name may
// repeat), or Modes: rotating the order between runs shows whether a
// variant's place in the run (a warmer database, a later moment on a
// shared machine) moves its numbers.
func ModesInOrder(tb testing.TB) []Mode {
	order := os.Getenv("OTELBENCH_ORDER")
	if order == "" {
		return Modes
	}
	var modes []Mode
	for name := range strings.SplitSeq(order, ",") {
		m, ok := map[string]Mode{"off": Off, "on": On, "metrics": MetricsOnly}[strings.TrimSpace(name)]
		if !ok {
			tb.Fatalf("OTELBENCH_ORDER=%q: %q is not off, on or metrics", order, name)
		}
		modes = append(modes, m)
	}
	return modes
}

// String names the variant in benchmark names: otel=off, otel=on,
// otel=metrics.
func (m Mode) String() string {
	switch m {
	case On:
		return "otel=on"
	case MetricsOnly:
		return "otel=metrics"
	}
	return "otel=off"
}

// Tracer returns nil (Off) or otelsyncguard's Tracer with the SDK (On,
// MetricsOnly), for syncguard.Config.Tracer or syncguardtest's SetTracer.
// The collection and the providers' shutdown run at the end of tb.
func Tracer(tb testing.TB, mode Mode) syncguard.Tracer {
	if mode == Off {
		return nil
	}
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	var tp trace.TracerProvider = tracenoop.NewTracerProvider()
	shutdown := func(context.Context) error { return nil }
	if mode == On {
		sdk := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))
		tp, shutdown = sdk, sdk.Shutdown
	}
	w := otelsyncguard.New(otelsyncguard.WithMeterProvider(mp), otelsyncguard.WithTracerProvider(tp))
	tb.Cleanup(func() {
		ctx := context.Background()
		var rm metricdata.ResourceMetrics
		if err := reader.Collect(ctx, &rm); err != nil {
			tb.Error(err)
		}
		w.Close()
		shutdown(ctx)
		mp.Shutdown(ctx)
	})
	return w
}

// ReportCPU reports the process's CPU time per iteration since start
// (a CPUTime value) as cpu-ns/op: unlike ns/op it counts the work done off
// the caller's goroutine (telemetry, span batching, GC) and not the time
// spent waiting for a core on a busy machine.
func ReportCPU(b *testing.B, start time.Duration) {
	if start == 0 || b.N == 0 {
		return
	}
	b.ReportMetric(float64(CPUTime()-start)/float64(b.N), "cpu-ns/op")
}
