package chaos

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/syncguard/syncguard-go/syncguard"
	"github.com/syncguard/syncguard-go/tests/pgtest"
	"github.com/syncguard/syncguard-go/tests/pgtest/tcpproxy"
)

// TestPgBouncerDriverSettings verifies, per driver setting, what docs and
// the adapters' PgBouncer tests claim: protocol round trips per operation
// (counted by a proxy between the driver and PgBouncer or PostgreSQL), and
// whether the setting survives PgBouncer 1.18 in transaction mode when
// concurrent clients share few server connections.
func TestPgBouncerDriverSettings(t *testing.T) {
	srv := pgtest.Require(t)
	if srv.Kind == pgtest.KindEnv {
		t.Skip("PgBouncer is started in front of a local or docker server only")
	}
	t.Parallel()
	bouncer := pgtest.RequirePgBouncer(t, srv, pgtest.PgBouncerOptions{DefaultPoolSize: 2})
	ctx := context.Background()
	type setting struct {
		name       string
		viaBouncer bool
		driver     string
		params     string
		noPrepare  bool
		// want: round trips per operation, with no errors.
		want float64
	}
	// Every setting works since a Backend detects the pooler (or the
	// errors it causes) and runs its statements one-shot; before, the
	// settings after the first six failed (docs/failure-model.md).
	settings := []setting{
		{"direct: lib/pq, prepared (default)", false, "postgres", "", false, 1},
		{"direct: pgx, prepared (default)", false, "pgx", "", false, 1},
		{"PgBouncer: lib/pq, binary_parameters=yes, DisablePrepare", true, "postgres", "&binary_parameters=yes", true, 1},
		{"PgBouncer: pgx, default_query_exec_mode=exec, DisablePrepare", true, "pgx", "&default_query_exec_mode=exec", true, 1},
		{"PgBouncer: pgx, default_query_exec_mode=simple_protocol, DisablePrepare", true, "pgx", "&default_query_exec_mode=simple_protocol", true, 1},
		{"PgBouncer: pgx, default_query_exec_mode=cache_describe, DisablePrepare", true, "pgx", "&default_query_exec_mode=cache_describe", true, 1},
		{"PgBouncer: lib/pq, DisablePrepare only", true, "postgres", "", true, 1},
		{"PgBouncer: pgx, default_query_exec_mode=describe_exec, DisablePrepare", true, "pgx", "&default_query_exec_mode=describe_exec", true, 1},
		{"PgBouncer: pgx, DisablePrepare only (cache_statement)", true, "pgx", "", true, 1},
		{"PgBouncer: lib/pq, prepared (default)", true, "postgres", "", false, 1},
		{"PgBouncer: lib/pq, binary_parameters=yes, prepared (default)", true, "postgres", "&binary_parameters=yes", false, 1},
		{"PgBouncer: pgx, prepared (default)", true, "pgx", "", false, 1},
		{"PgBouncer: pgx, default_query_exec_mode=exec, prepared (default)", true, "pgx", "&default_query_exec_mode=exec", false, 1},
	}
	var report strings.Builder
	for i, s := range settings {
		target := fmt.Sprintf("%s:%d", srv.Host, srv.Port)
		if s.viaBouncer {
			target = fmt.Sprintf("%s:%d", bouncer.Host, bouncer.Port)
		}
		p, err := tcpproxy.New(target)
		if err != nil {
			t.Fatal(err)
		}
		db, err := sql.Open(s.driver, fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable%s", p.Port(), s.params))
		if err != nil {
			t.Fatal(err)
		}
		cfg := &syncguard.Config{TableName: fmt.Sprintf("pgbsettings_%d_locks", i), FenceTableName: fmt.Sprintf("pgbsettings_%d_fences", i), DisablePrepare: s.noPrepare}
		b, err := syncguard.New(db, cfg)
		if err != nil {
			t.Fatal(err)
		}
		var rtPerOp float64
		var errs []string
		func() {
			defer db.Close()
			defer p.Close()
			if err := syncguard.SetupSchema(ctx, db, cfg); err != nil {
				errs = append(errs, "setup: "+firstLine(err.Error()))
				return
			}
			defer db.ExecContext(ctx, `DROP TABLE IF EXISTS "`+cfg.TableName+`", "`+cfg.FenceTableName+`"`)
			// Round trips: one connection, after a warm-up that prepares.
			db.SetMaxOpenConns(1)
			cycle := func(k string) error {
				r, err := b.Acquire(ctx, k, time.Minute)
				if err != nil {
					return err
				}
				_, err = b.Release(ctx, r.LockID)
				return err
			}
			if err := cycle("warm"); err != nil {
				errs = append(errs, "warm-up: "+firstLine(err.Error()))
			}
			const n = 20
			before := p.Turns()
			for j := 0; j < n; j++ {
				if err := cycle(fmt.Sprint("rt-", j)); err != nil {
					errs = append(errs, firstLine(err.Error()))
				}
			}
			rtPerOp = float64(p.Turns()-before) / (2 * n)
			// Concurrency: 8 clients over PgBouncer's 2 server connections.
			db.SetMaxOpenConns(8)
			var mu sync.Mutex
			var wg sync.WaitGroup
			for g := 0; g < 8; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for j := 0; j < 40; j++ {
						if err := cycle(fmt.Sprintf("c-%d-%d", g, j)); err != nil {
							mu.Lock()
							errs = append(errs, firstLine(err.Error()))
							mu.Unlock()
						}
					}
				}()
			}
			wg.Wait()
		}()
		first := ""
		if len(errs) > 0 {
			first = "; first: " + errs[0]
		}
		fmt.Fprintf(&report, "  %-74s %4.2f round trips/op, %3d errors%s\n", s.name, rtPerOp, len(errs), first)
		if rtPerOp != s.want || len(errs) > 0 {
			t.Errorf("%s: %.2f round trips per operation (want %.0f), %d errors%s", s.name, rtPerOp, s.want, len(errs), first)
		}
	}
	t.Logf("PgBouncer %s, pool_mode=transaction, default_pool_size=2:\n%s", bouncer.Version, report.String())
}
