package itest_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/syncguard/syncguard-go/internal/rules"
	"github.com/syncguard/syncguard-go/syncguard"
)

// preparedHold prepares, as a session of db, a transaction holding the
// transaction-level advisory lock an acquire of key tries, and leaves it
// prepared (it survives its session) until the test ends: what any role
// can do where max_prepared_transactions > 0 (issue 41).
func preparedHold(ctx context.Context, t *testing.T, admin, db *sql.DB, key, gid string) {
	t.Helper()
	norm, err := rules.NormalizeKey(key)
	if err != nil {
		t.Fatal(err)
	}
	storage, _, _ := rules.StorageKeys(norm)
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, q := range []string{`BEGIN`, `SELECT pg_advisory_xact_lock(hashtext('` + storage + `'))`, `PREPARE TRANSACTION '` + gid + `'`} {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			_, _ = conn.ExecContext(ctx, `ROLLBACK`)
			t.Fatalf("%s: %v", q, err)
		}
	}
	t.Cleanup(func() { _, _ = admin.Exec(`ROLLBACK PREPARED '` + gid + `'`) })
}

// preparedTransactionsStallNothing: a prepared transaction of a role
// without privileges on the lock tables holds a key's advisory lock; the
// key is still taken (never taken before, or a crashed holder's). One of
// a role that may write them (what a reference acquire prepared by a
// transaction manager would be) still excludes ours.
func preparedTransactionsStallNothing(ctx context.Context, t *testing.T, admin, evil, app *sql.DB, backend func() *syncguard.Backend, key func(string) string) {
	var mp int
	if err := admin.QueryRowContext(ctx, `SELECT current_setting('max_prepared_transactions')::int`).Scan(&mp); err != nil || mp == 0 {
		t.Fatalf("max_prepared_transactions = %d (%v): the test server must allow prepared transactions (tests/pgtest)", mp, err)
	}
	b := backend()
	fresh, crashed := key("prepared-fresh"), key("prepared-crashed")
	r, err := b.Acquire(ctx, crashed, time.Minute)
	if err != nil || !r.OK {
		t.Fatalf("acquire: %+v, %v", r, err)
	}
	// The holder crashed long ago: its row expired.
	mustExec(ctx, t, admin, `UPDATE adv_locks SET expires_at_ms = 0 WHERE lock_id = '`+r.LockID+`'`)
	gid := func(k string) string { return "sg-adv-" + k }
	preparedHold(ctx, t, admin, evil, fresh, gid(fresh))
	preparedHold(ctx, t, admin, evil, crashed, gid(crashed))
	for _, k := range []string{fresh, crashed} {
		for i := range 3 {
			r, err := b.Acquire(ctx, k, time.Minute)
			if err != nil || !r.OK {
				t.Fatalf("attempt %d on %q, a free key whose advisory lock a prepared transaction of a role without privileges holds: %+v, %v; want it taken (rule: no role without privileges can stall a key)", i, k, r, err)
			}
			if rr, err := b.Release(ctx, r.LockID); err != nil || !rr.OK {
				t.Fatalf("release: %+v, %v", rr, err)
			}
		}
	}

	privileged := key("prepared-privileged")
	preparedHold(ctx, t, admin, app, privileged, gid(privileged))
	r, err = b.Acquire(ctx, privileged, time.Minute)
	if err != nil || r.OK {
		t.Fatalf("acquire while a prepared transaction of a privileged role holds the key's advisory lock: %+v, %v; want locked", r, err)
	}
	norm, _ := rules.NormalizeKey(privileged)
	storage, _, _ := rules.StorageKeys(norm)
	var rows int
	if err := admin.QueryRowContext(ctx, `SELECT count(*) FROM adv_locks WHERE key = $1`, storage).Scan(&rows); err != nil || rows != 0 {
		t.Fatalf("that attempt wrote %d rows (%v); want none", rows, err)
	}
	mustExec(ctx, t, admin, `ROLLBACK PREPARED '`+gid(privileged)+`'`)
	if r, err = b.Acquire(ctx, privileged, time.Minute); err != nil || !r.OK {
		t.Fatalf("acquire once the prepared transaction rolled back: %+v, %v", r, err)
	}
}
