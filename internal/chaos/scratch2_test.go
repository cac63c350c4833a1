package chaos

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/syncguard/syncguard-go/internal/pgtest"
)

func TestScratchTerminate(t *testing.T) {
	srv := pgtest.Require(t)
	bn := pgtest.RequirePgBouncer(t, srv, pgtest.PgBouncerOptions{})
	ctx := context.Background()
	admin, _ := sql.Open("pgx", srv.DSN)
	defer admin.Close()
	admin.Exec(`create table if not exists tt(id int primary key); insert into tt values (1) on conflict do nothing`)
	for _, c := range []struct{ drv, dsn string }{{"postgres", bn.DSN + "&binary_parameters=yes"}, {"pgx", bn.DSN + "&default_query_exec_mode=exec"}, {"postgres", srv.DSN}, {"pgx", srv.DSN}} {
		tx, _ := admin.BeginTx(ctx, nil)
		tx.Exec(`select * from tt for update`)
		db, _ := sql.Open(c.drv, c.dsn)
		db.SetMaxOpenConns(1)
		ch := make(chan error, 1)
		start := time.Now()
		go func() { _, err := db.ExecContext(ctx, `update tt set id = id where id = $1`, 1); ch <- err }()
		var pid int
		for i := 0; i < 100; i++ {
			if admin.QueryRow(`select pid from pg_stat_activity where wait_event_type='Lock' and query like 'update tt%'`).Scan(&pid) == nil {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		admin.Exec(`select pg_terminate_backend($1)`, pid)
		select {
		case err := <-ch:
			t.Logf("%s %s: returned after %v: %v", c.drv, c.dsn, time.Since(start), err)
		case <-time.After(5 * time.Second):
			t.Logf("%s %s: still blocked after 5s", c.drv, c.dsn)
			tx.Rollback()
			err := <-ch
			t.Logf("   then: %v after %v", err, time.Since(start))
		}
		tx.Rollback()
		db.Close()
	}
	t.Log(bn.LogTail(15))
}
