package itest_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
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

// heldIdsSetNoPrice (issue 41): with another role holding a key's
// advisory id, acquires of that key after its first never read pg_locks
// (every lock of the server, each read taking every lock-manager
// partition's lock: a cost that grows with the locks other roles hold).
// The first acquire (no row yet) writes a placeholder and asks pg_locks
// who holds the id; its release keeps the row, expired, and the next
// acquire takes it over under row locks. Checked on the Backend's own
// prepared acquire statement (pg_prepared_statements of its one
// connection), run under EXPLAIN ANALYZE in a transaction rolled back:
// its scan of pg_lock_status is never executed.
func heldIdsSetNoPrice(ctx context.Context, t *testing.T, evil *sql.DB, backend func() *syncguard.Backend, db func() *sql.DB, key func(string) string) {
	k := key("no-price")
	holdAdvisory(ctx, t, evil, k, false)
	b := backend()
	conn := db()
	conn.SetMaxOpenConns(1)
	for i := range 3 {
		r, err := b.Acquire(ctx, k, time.Minute)
		if err != nil || !r.OK {
			t.Fatalf("cycle %d: acquire: %+v, %v; want it taken", i, r, err)
		}
		if rr, err := b.Release(ctx, r.LockID); err != nil || !rr.OK {
			t.Fatalf("cycle %d: release: %+v, %v", i, rr, err)
		}
	}
	// The plain acquire (five parameters), as its statement function
	// runs it: the statement after RETURN QUERY.
	var src string
	if err := conn.QueryRowContext(ctx, `SELECT p.prosrc FROM pg_catalog.pg_proc AS p
		WHERE p.proname LIKE 'adv\_locks\_op\_%' AND p.pronargs = 5 AND p.prosrc LIKE '%SKIP LOCKED%'`).Scan(&src); err != nil {
		t.Fatalf("the acquire's statement function: %v", err)
	}
	_, stmt, _ := strings.Cut(src, "RETURN QUERY\n")
	stmt, _, _ = strings.Cut(stmt, "; END")
	norm, _ := rules.NormalizeKey(k)
	storage, fence, _ := rules.StorageKeys(norm)
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback() //nolint:errcheck
	if _, err := tx.ExecContext(ctx, `PREPARE sg_acquire_41 AS `+stmt); err != nil {
		t.Fatalf("PREPARE the acquire: %v\n%s", err, stmt)
	}
	var plan string
	q := fmt.Sprintf(`EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE sg_acquire_41('%s', '%s', '%s', '%s', 60000)`, storage, rules.GenerateLockID(), fence, norm)
	if err := tx.QueryRowContext(ctx, q).Scan(&plan); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	if !strings.Contains(plan, "pg_lock_status") {
		t.Fatalf("no scan of pg_lock_status in the acquire's plan (the placeholder's check): %s", plan)
	}
	var nodes []map[string]any
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			if x["Function Name"] == "pg_lock_status" {
				nodes = append(nodes, x)
			}
			for _, c := range x {
				walk(c)
			}
		case []any:
			for _, c := range x {
				walk(c)
			}
		}
	}
	var doc any
	if err := json.Unmarshal([]byte(plan), &doc); err != nil {
		t.Fatal(err)
	}
	walk(doc)
	for _, n := range nodes {
		if loops, _ := n["Actual Loops"].(float64); loops != 0 {
			t.Fatalf("the acquire of a key that has a row, whose advisory id another role holds, read pg_locks (%v loops of pg_lock_status); want none (rule: no statement whose cost grows with the locks other roles hold)", loops)
		}
	}
	if _, err := tx.ExecContext(ctx, `DEALLOCATE sg_acquire_41`); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d scans of pg_lock_status in the plan, none executed", len(nodes))
}

// rolledBackWithTxRows (issue 41): WithTx acquires of keys whose advisory
// ids another role holds, rolled back, leave their placeholders (committed
// on the pool: an acquire takes over only a committed row, docs/design.md):
// one row per key, never live, taken over by the key's next acquire, and
// no more rows from further rolled-back acquires of the same keys.
func rolledBackWithTxRows(ctx context.Context, t *testing.T, admin, evil *sql.DB, backend func() *syncguard.Backend, db func() *sql.DB, key func(string) string) {
	b := backend()
	const n = 10
	var keys, storage []string
	for i := range n {
		k := key(fmt.Sprintf("rolled-back-%d", i))
		holdAdvisory(ctx, t, evil, k, false)
		norm, _ := rules.NormalizeKey(k)
		s, _, _ := rules.StorageKeys(norm)
		keys, storage = append(keys, k), append(storage, s)
	}
	rows := func() (all, live int) {
		t.Helper()
		if err := admin.QueryRowContext(ctx, `SELECT count(*), count(*) FILTER (WHERE expires_at_ms > 0) FROM adv_locks WHERE key = ANY($1)`,
			"{"+strings.Join(storage, ",")+"}").Scan(&all, &live); err != nil {
			t.Fatal(err)
		}
		return all, live
	}
	rollBack := func(round int) {
		t.Helper()
		for _, k := range keys {
			tx, err := db().BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			r, err := b.WithTx(tx).Acquire(ctx, k, time.Minute)
			_ = tx.Rollback()
			if err != nil || !r.OK {
				t.Fatalf("round %d: WithTx acquire of %q: %+v, %v; want it taken", round, k, r, err)
			}
		}
		if all, live := rows(); all > n || live != 0 {
			t.Fatalf("round %d: %d rows (%d live) after %d rolled-back WithTx acquires of %d keys; want at most one per key, none live", round, all, live, n*round, n)
		}
	}
	rollBack(1)
	rollBack(2)
	for _, k := range keys {
		r, err := b.Acquire(ctx, k, time.Minute)
		if err != nil || !r.OK {
			t.Fatalf("acquire after the rolled-back ones: %+v, %v", r, err)
		}
		if rr, err := b.Release(ctx, r.LockID); err != nil || !rr.OK {
			t.Fatalf("release: %+v, %v", rr, err)
		}
	}
	if all, live := rows(); all > n || live != 0 {
		t.Fatalf("%d rows (%d live) after the keys' next acquires and releases; want at most one per key, none live", all, live)
	}
}
