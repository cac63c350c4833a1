package oteltest

import (
	"context"
	"testing"
	"time"

	"github.com/syncguard/syncguard-go/syncguardtest"
)

// BenchmarkW1Fake is W1 (sequential acquire + release of one key) on the
// in-memory fake: a few microseconds per pair, so it shows the
// instrumentation's own cost per operation, not a share of a database
// round trip (pgbench measures that).
func BenchmarkW1Fake(b *testing.B) {
	for _, mode := range Modes {
		b.Run(mode.String(), func(b *testing.B) {
			locker := syncguardtest.New()
			locker.SetTracer(Tracer(b, mode))
			ctx := context.Background()
			b.ReportAllocs()
			cpu := CPUTime()
			for b.Loop() {
				r, err := locker.Acquire(ctx, "w1", time.Minute)
				if err != nil || !r.OK {
					b.Fatal(r, err)
				}
				if _, err := locker.Release(ctx, r.LockID); err != nil {
					b.Fatal(err)
				}
			}
			ReportCPU(b, cpu)
		})
	}
}
