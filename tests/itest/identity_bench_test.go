package itest_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/syncguard/syncguard-go/syncguard"
	"github.com/syncguard/syncguard-go/tests/pgtest"
)

// BenchmarkAcquireIdentity compares an acquire (and its release) without
// a holder identity and with one, on pgx against the throwaway server:
// go test -run '^$' -bench AcquireIdentity . The two modes alternate in
// rounds, so that a loaded machine slows both alike; the medians of the
// rounds' per-acquire times are reported. SYNCGUARD_BENCH_FSYNC=1 runs it
// on a throwaway server of its own with fsync on, as make bench does.
func BenchmarkAcquireIdentity(b *testing.B) {
	ctx := context.Background()
	dsn := ""
	if os.Getenv("SYNCGUARD_BENCH_FSYNC") != "" {
		srv, err := pgtest.Start(ctx, pgtest.Options{Fsync: true})
		if err != nil {
			b.Fatal(err)
		}
		defer srv.Stop() //nolint:errcheck
		dsn = srv.DSN
	} else {
		dsn = pgtest.Require(b).DSN
	}
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	cfg := &syncguard.Config{TableName: "bench_ident_locks", FenceTableName: "bench_ident_fences"}
	for _, tbl := range []string{"bench_ident_locks", "bench_ident_fences", "bench_ident_locks_waiters", "bench_ident_locks_holders"} {
		_, _ = db.ExecContext(ctx, `DROP TABLE IF EXISTS `+tbl)
	}
	if err := syncguard.SetupSchema(ctx, db, cfg); err != nil {
		b.Fatal(err)
	}
	plain, err := syncguard.New(db, cfg)
	if err != nil {
		b.Fatal(err)
	}
	c2 := *cfg
	c2.Identity = syncguard.DefaultIdentity()
	ident, err := syncguard.New(db, &c2)
	if err != nil {
		b.Fatal(err)
	}
	const keys, perRound = 64, 200
	round := func(be *syncguard.Backend) (acq, rel time.Duration) {
		for i := range perRound {
			k := fmt.Sprintf("bench:%d", i%keys)
			t0 := time.Now()
			r, err := be.Acquire(ctx, k, time.Minute)
			t1 := time.Now()
			if err != nil || !r.OK {
				b.Fatal(r, err)
			}
			if _, err := be.Release(ctx, r.LockID); err != nil {
				b.Fatal(err)
			}
			acq += t1.Sub(t0)
			rel += time.Since(t1)
		}
		return acq / perRound, rel / perRound
	}
	round(plain) // warm up: prepared statements, fence rows
	round(ident)
	var pa, pr, ia, ir []time.Duration
	b.ResetTimer()
	for range b.N {
		a, r := round(plain)
		pa, pr = append(pa, a), append(pr, r)
		a, r = round(ident)
		ia, ir = append(ia, a), append(ir, r)
	}
	med := func(d []time.Duration) float64 { slices.Sort(d); return float64(d[len(d)/2].Microseconds()) }
	b.ReportMetric(med(pa), "acquire-µs")
	b.ReportMetric(med(ia), "acquire-identity-µs")
	b.ReportMetric(med(pr), "release-µs")
	b.ReportMetric(med(ir), "release-identity-µs")
	b.ReportMetric(100*(med(ia)/med(pa)-1), "acquire-extra-%")
}
