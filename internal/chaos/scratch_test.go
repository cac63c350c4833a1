package chaos

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/syncguard/syncguard-go/internal/pgtest"
	sgpq "github.com/syncguard/syncguard-go/pq"
	"github.com/syncguard/syncguard-go/pgxstd"
	"github.com/syncguard/syncguard-go/syncguard"
)

func TestMain(m *testing.M) { pgtest.Main(m, pgtest.Options{}) }

var _ = sgpq.Dialect
var _ = pgxstd.Dialect

func TestScratch(t *testing.T) {
	srv := pgtest.Require(t)
	bn := pgtest.RequirePgBouncer(t, srv, pgtest.PgBouncerOptions{DefaultPoolSize: 4})
	ctx := context.Background()
	for _, c := range []struct{ drv, extra string; noPrep bool }{
		{"postgres", "", false}, {"postgres", "", true}, {"postgres", "&binary_parameters=yes", true},
		{"pgx", "", false}, {"pgx", "", true}, {"pgx", "&default_query_exec_mode=exec", true}, {"pgx", "&default_query_exec_mode=simple_protocol", true}, {"pgx", "&default_query_exec_mode=cache_describe", true},{"pgx", "&default_query_exec_mode=describe_exec", true},
	} {
		db, _ := sql.Open(c.drv, bn.DSN+c.extra)
		db.SetMaxOpenConns(8)
		cfg := &syncguard.Config{TableName: "scr_locks", FenceTableName: "scr_fences", DisablePrepare: c.noPrep}
		if err := syncguard.SetupSchema(ctx, db, cfg); err != nil { t.Logf("%v: setup %v", c, err); continue }
		b, _ := syncguard.New(db, cfg)
		var firstErr error
		n := 0
		for i := 0; i < 200; i++ {
			k := fmt.Sprint("k", i%7)
			// parallel-ish use to spread across server conns
			done := make(chan error, 4)
			for j := 0; j < 4; j++ {
				go func() {
					r, err := b.Acquire(ctx, k+fmt.Sprint(j), time.Second)
					if err == nil && r.OK { _, err = b.Release(ctx, r.LockID) }
					done <- err
				}()
			}
			for j := 0; j < 4; j++ { if err := <-done; err != nil { n++; if firstErr == nil { firstErr = err } } }
		}
		t.Logf("%s%s noPrepare=%v: %d errors; first: %v", c.drv, c.extra, c.noPrep, n, firstErr)
		db.Close()
	}
}
