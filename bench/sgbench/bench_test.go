package sgbench

// Go benchmarks of the hot paths, for both adapters:
//
//	cd bench && go test -run '^$' -bench . -benchmem ./sgbench
//
// (make bench-go). They use SYNCGUARD_BENCH_DSN or start a throwaway
// PostgreSQL with fsync on; ns/op is therefore a durable commit for the
// writes. allocs/op is the client's cost, compared with a bare
// QueryRowContext+Scan of the same arguments and result types through the
// same driver (BenchmarkBareQueryRowScan).
//
// No server is started unless -test.bench is given, so `go test ./...`
// (make test) runs only the unit tests.

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
	_ "github.com/lib/pq"

	_ "github.com/syncguard/syncguard-go/pgxstd"
	_ "github.com/syncguard/syncguard-go/pq"
	"github.com/syncguard/syncguard-go/tests/pgtest"
)

var benchDSN string

func TestMain(m *testing.M) {
	flag.Parse()
	if f := flag.Lookup("test.bench"); f == nil || f.Value.String() == "" {
		os.Exit(m.Run())
	}
	benchDSN = os.Getenv("SYNCGUARD_BENCH_DSN")
	var srv *pgtest.Server
	if benchDSN == "" {
		os.Unsetenv(pgtest.EnvDSN) // a fsync=off test server must not stand in
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		var err error
		srv, err = pgtest.Start(ctx, pgtest.Options{Fsync: true})
		cancel()
		if err != nil {
			fmt.Fprintln(os.Stderr, "sgbench: no PostgreSQL for the benchmarks:", err)
			os.Exit(1)
		}
		benchDSN = srv.DSN
	}
	code := m.Run()
	closeEnvs()
	if srv != nil {
		srv.Stop() //nolint:errcheck
	}
	os.Exit(code)
}

var (
	envMu sync.Mutex
	envs  = map[string]*Env{}
)

var benchDrivers = []struct{ name, sqlName string }{{"pq", "postgres"}, {"pgx", "pgx"}}

// benchEnv returns the driver's environment, set up once per process.
func benchEnv(b *testing.B, driver, sqlName string) *Env {
	b.Helper()
	envMu.Lock()
	defer envMu.Unlock()
	if e := envs[driver]; e != nil {
		return e
	}
	ctx := context.Background()
	open := func(n int) *sql.DB {
		db, err := sql.Open(sqlName, benchDSN)
		if err != nil {
			b.Fatal(err)
		}
		db.SetMaxOpenConns(n)
		db.SetMaxIdleConns(n)
		return db
	}
	db := open(8)
	if err := SetupTables(ctx, db); err != nil {
		b.Fatal(err)
	}
	lk, err := NewLockers(ctx, db)
	if err != nil {
		b.Fatal(err)
	}
	e := &Env{Cfg: Config{Driver: driver, RunID: fmt.Sprintf("gobench-%s-%d", driver, time.Now().UnixNano())}, DB: db, Admin: open(1), Lockers: lk}
	envs[driver] = e
	return e
}

func closeEnvs() {
	envMu.Lock()
	defer envMu.Unlock()
	for _, e := range envs {
		DropTables(context.Background(), e.DB, SGTable, SGFenceTable, RefTable, RefFenceTable, FloorTable) //nolint:errcheck
		e.Lockers.Close()
		e.DB.Close()
		e.Admin.Close()
	}
}

// forDrivers runs fn as a sub-benchmark per driver.
func forDrivers(b *testing.B, fn func(b *testing.B, e *Env)) {
	for _, d := range benchDrivers {
		b.Run(d.name, func(b *testing.B) {
			e := benchEnv(b, d.name, d.sqlName)
			b.ReportAllocs()
			fn(b, e)
		})
	}
}

var benchSeq int64

func benchKeys(e *Env, tag string, n int) []string {
	benchSeq++
	ks := make([]string, n)
	for i := range ks {
		ks[i] = fmt.Sprintf("%s:%s:%d:order-%08d", e.Cfg.RunID, tag, benchSeq, i)
	}
	return ks
}

const benchTTL = time.Minute

// benchAcquireAll acquires ks (outside any timer) and returns the lockIds.
func benchAcquireAll(b *testing.B, e *Env, ks []string) []string {
	ids := make([]string, len(ks))
	for i, k := range ks {
		r, err := e.SG.B.Acquire(context.Background(), k, benchTTL)
		if err != nil || !r.OK {
			b.Fatalf("acquire %s: %v %v", k, r.OK, err)
		}
		ids[i] = r.LockID
	}
	return ids
}

func benchReleaseAll(b *testing.B, e *Env, ids []string) {
	for _, id := range ids {
		if _, err := e.SG.B.Release(context.Background(), id); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAcquireRelease(b *testing.B) {
	forDrivers(b, func(b *testing.B, e *Env) {
		ctx := context.Background()
		ks := benchKeys(e, "ar", b.N)
		b.ResetTimer()
		for i := range b.N {
			r, err := e.SG.B.Acquire(ctx, ks[i], benchTTL)
			if err != nil || !r.OK {
				b.Fatalf("acquire: %v %v", r.OK, err)
			}
			if rr, err := e.SG.B.Release(ctx, r.LockID); err != nil || !rr.OK {
				b.Fatalf("release: %v %v", rr.OK, err)
			}
		}
	})
}

func BenchmarkAcquire(b *testing.B) {
	forDrivers(b, func(b *testing.B, e *Env) {
		ctx := context.Background()
		ks := benchKeys(e, "a", b.N)
		ids := make([]string, b.N)
		b.ResetTimer()
		for i := range b.N {
			r, err := e.SG.B.Acquire(ctx, ks[i], benchTTL)
			if err != nil || !r.OK {
				b.Fatalf("acquire: %v %v", r.OK, err)
			}
			ids[i] = r.LockID
		}
		b.StopTimer()
		benchReleaseAll(b, e, ids)
	})
}

// BenchmarkAcquireContended is a failed attempt on a held key.
func BenchmarkAcquireContended(b *testing.B) {
	forDrivers(b, func(b *testing.B, e *Env) {
		ctx := context.Background()
		ks := benchKeys(e, "held", 1)
		ids := benchAcquireAll(b, e, ks)
		b.ResetTimer()
		for range b.N {
			r, err := e.SG.B.Acquire(ctx, ks[0], benchTTL)
			if err != nil || r.OK {
				b.Fatalf("contended acquire: %v %v", r.OK, err)
			}
		}
		b.StopTimer()
		benchReleaseAll(b, e, ids)
	})
}

func BenchmarkRelease(b *testing.B) {
	forDrivers(b, func(b *testing.B, e *Env) {
		ctx := context.Background()
		ids := benchAcquireAll(b, e, benchKeys(e, "r", b.N))
		b.ResetTimer()
		for i := range b.N {
			if r, err := e.SG.B.Release(ctx, ids[i]); err != nil || !r.OK {
				b.Fatalf("release: %v %v", r.OK, err)
			}
		}
	})
}

func BenchmarkExtend(b *testing.B) {
	forDrivers(b, func(b *testing.B, e *Env) {
		ctx := context.Background()
		ids := benchAcquireAll(b, e, benchKeys(e, "x", 16))
		b.ResetTimer()
		for i := range b.N {
			if r, err := e.SG.B.Extend(ctx, ids[i%len(ids)], benchTTL); err != nil || !r.OK {
				b.Fatalf("extend: %v %v", r.OK, err)
			}
		}
		b.StopTimer()
		benchReleaseAll(b, e, ids)
	})
}

func benchRead(b *testing.B, fn func(ctx context.Context, e *Env, key, id string) error) {
	forDrivers(b, func(b *testing.B, e *Env) {
		ctx := context.Background()
		ks := benchKeys(e, "read", 100)
		ids := benchAcquireAll(b, e, ks)
		b.ResetTimer()
		for i := range b.N {
			if err := fn(ctx, e, ks[i%len(ks)], ids[i%len(ids)]); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		benchReleaseAll(b, e, ids)
	})
}

func BenchmarkIsLocked(b *testing.B) {
	benchRead(b, func(ctx context.Context, e *Env, key, _ string) error {
		ok, err := e.SG.B.IsLocked(ctx, key)
		if err == nil && !ok {
			err = fmt.Errorf("not locked")
		}
		return err
	})
}

func BenchmarkLookupKey(b *testing.B) {
	benchRead(b, func(ctx context.Context, e *Env, key, _ string) error {
		info, err := e.SG.B.LookupKey(ctx, key)
		if err == nil && info == nil {
			err = fmt.Errorf("not found")
		}
		return err
	})
}

func BenchmarkLookupID(b *testing.B) {
	benchRead(b, func(ctx context.Context, e *Env, _, id string) error {
		info, err := e.SG.B.LookupID(ctx, id)
		if err == nil && info == nil {
			err = fmt.Errorf("not found")
		}
		return err
	})
}

// BenchmarkBareQueryRowScan is the allocation yardstick for Acquire: one
// prepared statement with acquire's five arguments, returning acquire's
// five result types, scanned into the same destination types.
func BenchmarkBareQueryRowScan(b *testing.B) {
	forDrivers(b, func(b *testing.B, e *Env) {
		ctx := context.Background()
		st, err := e.DB.PrepareContext(ctx, BareAcquireSQL)
		if err != nil {
			b.Fatal(err)
		}
		defer st.Close()
		ks := benchKeys(e, "bare", 256)
		args := make([][]any, len(ks))
		for i, k := range ks {
			args[i] = BareAcquireArgs(k)
		}
		b.ResetTimer()
		for i := range b.N {
			if err := ScanAcquireShaped(st.QueryRowContext(ctx, args[i%len(args)]...)); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkFloorInsertDelete is the durable floor of AcquireRelease: an
// autocommitted INSERT and DELETE of one row.
func BenchmarkFloorInsertDelete(b *testing.B) {
	forDrivers(b, func(b *testing.B, e *Env) {
		ctx := context.Background()
		ks := benchKeys(e, "floor", b.N)
		b.ResetTimer()
		for i := range b.N {
			if _, ok, err := e.Floor.Acquire(ctx, ks[i], 0); err != nil || !ok {
				b.Fatalf("insert: %v %v", ok, err)
			}
			if ok, err := e.Floor.Release(ctx, ks[i]); err != nil || !ok {
				b.Fatalf("delete: %v %v", ok, err)
			}
		}
	})
}

func BenchmarkSelect1(b *testing.B) {
	forDrivers(b, func(b *testing.B, e *Env) {
		ctx := context.Background()
		f := e.Floor.WithSelect1()
		b.ResetTimer()
		for range b.N {
			if err := f.Read(ctx, "", ""); err != nil {
				b.Fatal(err)
			}
		}
	})
}
