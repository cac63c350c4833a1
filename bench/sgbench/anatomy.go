package sgbench

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/syncguard/syncguard-go/internal/rules"
	"github.com/syncguard/syncguard-go/syncguard"
)

// AnatomyRow is one statement's sequential latency with synchronous_commit
// off: the server's CPU and the round trip, without the WAL flush.
type AnatomyRow struct {
	Op  string  `json:"op"`
	N   int     `json:"n"`
	P10 float64 `json:"p10_us"`
	P50 float64 `json:"p50_us"`
}

// AnatomyResult is the cost breakdown: one JSON line.
type AnatomyResult = TableResult[AnatomyRow]

// Anatomy splits acquire and release into their parts by timing, on one
// connection with synchronous_commit off, interleaved per iteration:
// the floor's INSERT and DELETE, a bare INSERT of a lock row into the
// spec's schema (three indexes), the fence upsert plus that INSERT in one
// statement, syncguard's Acquire; a bare DELETE by lock_id, syncguard's
// Release, and a Release of a lock already released (the failure path,
// which also reads the row's expiry for the reason). What acquire costs
// beyond "fence + lock row" is the statement's read-and-decide part.
func Anatomy(ctx context.Context, driver, sqlName, dsn string, n int) (*AnatomyResult, error) {
	db, err := sql.Open(sqlName, dsn)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	if _, err := db.ExecContext(ctx, "SET synchronous_commit = off"); err != nil {
		return nil, err
	}
	lk, err := NewLockers(ctx, db)
	if err != nil {
		return nil, err
	}
	defer lk.Close()
	sg, floor := lk.SG, lk.Floor
	// A second copy of the spec schema for the bare statements, so their
	// rows do not share pages and indexes with syncguard's.
	const bareLocks, bareFences = "sgbench_bare_locks", "sgbench_bare_fences"
	if err := DropTables(ctx, db, bareLocks, bareFences); err != nil {
		return nil, err
	}
	defer DropTables(context.WithoutCancel(ctx), db, bareLocks, bareFences) //nolint:errcheck
	if err := syncguard.SetupSchema(ctx, db, &syncguard.Config{TableName: bareLocks, FenceTableName: bareFences}); err != nil {
		return nil, err
	}
	bl, bf := rules.QuoteIdent(bareLocks), rules.QuoteIdent(bareFences)
	prep := func(q string) (*sql.Stmt, error) { return db.PrepareContext(ctx, q) }
	insLock, err := prep(`INSERT INTO ` + bl + ` (key, lock_id, expires_at_ms, acquired_at_ms, fence, user_key) VALUES ($1, $2, 1, 1, '000000000000001', $1)`)
	if err != nil {
		return nil, err
	}
	defer insLock.Close()
	fenceAndLock, err := prep(`WITH f AS (
  INSERT INTO ` + bf + ` AS c (fence_key, fence, key_debug) VALUES ($3, 1, $1)
  ON CONFLICT (fence_key) DO UPDATE SET fence = c.fence + 1 RETURNING c.fence)
INSERT INTO ` + bl + ` (key, lock_id, expires_at_ms, acquired_at_ms, fence, user_key)
SELECT $1, $2, 1, 1, ` + rules.FenceTextSQL("f.fence") + `, $1 FROM f`)
	if err != nil {
		return nil, err
	}
	defer fenceAndLock.Close()
	delByID, err := prep(`DELETE FROM ` + bl + ` WHERE lock_id = $1`)
	if err != nil {
		return nil, err
	}
	defer delByID.Close()
	type step struct {
		name string
		fn   func(i int) error
	}
	tag := fmt.Sprintf("anat-%d", time.Now().UnixNano())
	key := func(set string, i int) string { return fmt.Sprintf("%s:%s:order-%08d", tag, set, i) }
	ids := make([]string, n+100)
	bareID := func(set string, i int) string { return fmt.Sprintf("%s%021d", set, i) }
	exec := func(st *sql.Stmt, args ...any) error { _, err := st.ExecContext(ctx, args...); return err }
	steps := []step{
		{"floor INSERT", func(i int) error { _, _, err := floor.Acquire(ctx, key("f", i), 0); return err }},
		{"bare lock-row INSERT (spec schema, 3 indexes)", func(i int) error { return exec(insLock, key("b", i), bareID("b", i)) }},
		{"fence upsert + lock-row INSERT (one statement)", func(i int) error {
			k := key("c", i)
			return exec(fenceAndLock, k, bareID("c", i), "fence:"+k)
		}},
		{"syncguard Acquire", func(i int) error {
			r, err := sg.B.Acquire(ctx, key("s", i), time.Minute)
			ids[i] = r.LockID
			return err
		}},
		{"syncguard Acquire (held key: fails)", func(i int) error { _, err := sg.B.Acquire(ctx, key("s", i), time.Minute); return err }},
		{"floor DELETE", func(i int) error { _, err := floor.Release(ctx, key("f", i)); return err }},
		{"bare DELETE by lock_id", func(i int) error { return exec(delByID, bareID("b", i)) }},
		{"syncguard Release", func(i int) error {
			r, err := sg.B.Release(ctx, ids[i])
			if err == nil && !r.OK {
				err = fmt.Errorf("release of a held lock failed: %s", r.Reason)
			}
			return err
		}},
		{"syncguard Release (already released: fails)", func(i int) error {
			r, err := sg.B.Release(ctx, ids[i])
			if err == nil && r.OK {
				err = fmt.Errorf("second release succeeded")
			}
			return err
		}},
		{"SELECT 1", func(i int) error { return floor.WithSelect1().Read(ctx, "", "") }},
	}
	lat := make([][]time.Duration, len(steps))
	warm := 100
	for i := range n + warm {
		for j, s := range steps {
			t0 := time.Now()
			if err := s.fn(i); err != nil {
				return nil, fmt.Errorf("anatomy: %s: %w", s.name, err)
			}
			if i >= warm {
				lat[j] = append(lat[j], time.Since(t0))
			}
		}
	}
	// The rows written by fenceAndLock are removed outside the measurement.
	for i := range n + warm {
		if err := exec(delByID, bareID("c", i)); err != nil {
			return nil, err
		}
	}
	res := &AnatomyResult{Bench: "syncguard", Driver: driver, Workload: "anatomy",
		Method: "sequential on one connection, synchronous_commit = off (CPU and round trip, no WAL flush), interleaved per iteration"}
	for j, s := range steps {
		l := lat[j]
		sum := Summarize(l)
		p10 := float64(Percentile(l, 0.10).Nanoseconds()) / 1e3
		res.Rows = append(res.Rows, AnatomyRow{Op: s.name, N: len(l), P10: p10, P50: sum.P50})
	}
	return res, nil
}
