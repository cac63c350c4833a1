package oteltest

import (
	"context"
	"testing"

	"github.com/syncguard/syncguard-go/otelsyncguard"
	"github.com/syncguard/syncguard-go/syncguard"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// Instrumented names a benchmark variant.
func Instrumented(on bool) string {
	if on {
		return "otel=on"
	}
	return "otel=off"
}

// Locker returns backend itself (off) or wrapped by otelsyncguard with
// the SDK (on): a manual reader collected at the end, every span sampled
// and batched to an exporter that discards it. The collection and the
// tracer provider's shutdown run at the end of tb.
func Locker(tb testing.TB, backend syncguard.LockBackend, on bool) syncguard.LockBackend {
	if !on {
		return backend
	}
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))
	w := otelsyncguard.Wrap(backend, otelsyncguard.WithMeterProvider(mp), otelsyncguard.WithTracerProvider(tp))
	tb.Cleanup(func() {
		ctx := context.Background()
		w.Flush(ctx)
		var rm metricdata.ResourceMetrics
		if err := reader.Collect(ctx, &rm); err != nil {
			tb.Error(err)
		}
		w.Close()
		tp.Shutdown(ctx)
		mp.Shutdown(ctx)
	})
	return w
}
