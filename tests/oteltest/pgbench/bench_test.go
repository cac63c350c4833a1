// Package pgbench measures otelsyncguard's overhead on a throwaway
// PostgreSQL: W1 (sequential acquire + release) and W6a (8 workers contend
// for one key, hold 10 ms, pause 20 ms), as in docs/performance.md, with
// the instrumentation off and on (SDK, manual reader, sampled spans), and
// with metrics only (no-op tracer provider).
//
//	cd tests/oteltest && go test -run '^$' -bench . -count 6 ./pgbench
//
// OTELBENCH_ORDER=on,metrics,off runs W1's variants in that order.
package pgbench

import (
	"context"
	"database/sql"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/syncguard/syncguard-go/pgxstd"
	"github.com/syncguard/syncguard-go/syncguard"
	"github.com/syncguard/syncguard-go/tests/oteltest"
	"github.com/syncguard/syncguard-go/tests/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m, pgtest.Options{}) }

func backend(b *testing.B, conns int, tracer syncguard.Tracer) *syncguard.Backend {
	srv := pgtest.Require(b)
	ctx := context.Background()
	dsn, err := srv.CreateDatabase(ctx, "otelbench")
	if err != nil {
		b.Fatal(err)
	}
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	db.SetMaxOpenConns(conns)
	db.SetMaxIdleConns(conns)
	if err := syncguard.SetupSchema(ctx, db, nil); err != nil {
		b.Fatal(err)
	}
	be, err := syncguard.New(db, &syncguard.Config{Tracer: tracer})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { be.Close() })
	return be
}

// BenchmarkW1: sequential acquire + release of one key; ns/op is one pair.
func BenchmarkW1(b *testing.B) {
	for _, mode := range oteltest.ModesInOrder(b) {
		b.Run(mode.String(), func(b *testing.B) {
			locker := backend(b, 2, oteltest.Tracer(b, mode))
			ctx := context.Background()
			cpu := oteltest.CPUTime()
			for b.Loop() {
				r, err := locker.Acquire(ctx, "w1", time.Minute)
				if err != nil || !r.OK {
					b.Fatal(r, err)
				}
				if _, err := locker.Release(ctx, r.LockID); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "pairs/s")
			oteltest.ReportCPU(b, cpu)
		})
	}
}

// BenchmarkW6a: 8 workers, one Backend each (as if 8 processes), loop
// WithLock(one key, hold 10 ms) and pause 20 ms, for 2 s; reports the
// completed WithLock calls per second and the time the lock was in use.
func BenchmarkW6a(b *testing.B) {
	for _, mode := range oteltest.Modes {
		b.Run(mode.String(), func(b *testing.B) {
			const workers, hold, pause, run = 8, 10 * time.Millisecond, 20 * time.Millisecond, 2 * time.Second
			lockers := make([]syncguard.LockBackend, workers)
			for i := range lockers {
				lockers[i] = backend(b, 2, oteltest.Tracer(b, mode))
			}
			b.ResetTimer()
			var done, busy atomic.Int64
			for range b.N {
				ctx, cancel := context.WithTimeout(context.Background(), run)
				var wg sync.WaitGroup
				start := time.Now()
				for i := range workers {
					wg.Go(func() {
						for ctx.Err() == nil {
							err := syncguard.WithLock(ctx, lockers[i], "w6a", func(ctx context.Context, _ *syncguard.Lease) error {
								t := time.Now()
								time.Sleep(hold)
								busy.Add(int64(time.Since(t)))
								return nil
							}, &syncguard.LockOptions{TTL: 30 * time.Second})
							if err == nil {
								done.Add(1)
							}
							time.Sleep(pause)
						}
					})
				}
				wg.Wait()
				cancel()
				_ = start
			}
			secs := b.Elapsed().Seconds()
			b.ReportMetric(float64(done.Load())/secs, "withlocks/s")
			b.ReportMetric(100*float64(busy.Load())/float64(b.Elapsed()), "util%")
		})
	}
}
