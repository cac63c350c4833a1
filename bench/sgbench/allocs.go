package sgbench

import (
	"context"
	"database/sql"
	"fmt"
	"runtime"
	"time"

	"github.com/syncguard/syncguard-go/internal/rules"
)

// AllocRow is the client-side allocation cost of one operation, counted as
// testing.B does (runtime.MemStats Mallocs and TotalAlloc deltas over n
// sequential operations).
type AllocRow struct {
	Op          string  `json:"op"`
	N           int     `json:"n"`
	AllocsPerOp float64 `json:"allocs_per_op"`
	BytesPerOp  float64 `json:"bytes_per_op"`
	NsPerOp     float64 `json:"ns_per_op"`
}

// AllocResult is one driver's allocation table: one JSON line.
type AllocResult = TableResult[AllocRow]

// BareAcquireSQL is the comparison for syncguard's acquire: one prepared
// statement taking acquire's five arguments and returning a row of acquire's
// five result types, scanned into the same destination types.
var BareAcquireSQL = `SELECT $2::text, $5::bigint + 1, $5::bigint, ` + rules.FenceTextSQL("1") + `, ($1::text = $4::text AND $3::text <> '')`

// BareReleaseSQL is the comparison for release: one argument, three columns.
const BareReleaseSQL = `SELECT $1::text, 1::bigint, 2::bigint`

func countAllocs(n int, fn func(i int) error) (AllocRow, error) {
	var a, b runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&a)
	t0 := time.Now()
	for i := range n {
		if err := fn(i); err != nil {
			return AllocRow{}, err
		}
	}
	el := time.Since(t0)
	runtime.ReadMemStats(&b)
	f := float64(n)
	return AllocRow{N: n, AllocsPerOp: float64(b.Mallocs-a.Mallocs) / f, BytesPerOp: float64(b.TotalAlloc-a.TotalAlloc) / f,
		NsPerOp: float64(el.Nanoseconds()) / f}, nil
}

// BareAcquireArgs returns the arguments syncguard's acquire sends for key.
func BareAcquireArgs(key string) []any {
	norm, _ := rules.NormalizeKey(key)
	storage, fence, _ := rules.StorageKeys(norm)
	return []any{storage, rules.GenerateLockID(), fence, norm, int64(30000)}
}

// ScanAcquireShaped scans a row into acquire's destination types.
func ScanAcquireShaped(row *sql.Row) error {
	var (
		id, fence         sql.NullString
		expires, acquired sql.NullInt64
		exhausted         bool
	)
	return row.Scan(&id, &expires, &acquired, &fence, &exhausted)
}

// ScanReleaseShaped scans a row into release's destination types.
func ScanReleaseShaped(row *sql.Row) error {
	var (
		deleted sql.NullString
		seen    sql.NullInt64
		now     int64
	)
	return row.Scan(&deleted, &seen, &now)
}

// Allocs measures client allocations per operation, sequentially on the
// warmed pool.
func (e *Env) Allocs(ctx context.Context, n int) (*AllocResult, error) {
	bareAcq, err := e.DB.PrepareContext(ctx, BareAcquireSQL)
	if err != nil {
		return nil, err
	}
	defer bareAcq.Close()
	bareRel, err := e.DB.PrepareContext(ctx, BareReleaseSQL)
	if err != nil {
		return nil, err
	}
	defer bareRel.Close()

	keys := make([]string, n)
	args := make([][]any, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s:alloc:order-%08d", e.Cfg.RunID, i)
		args[i] = BareAcquireArgs(keys[i])
	}
	ids := make([]string, n)
	ttl := time.Minute
	b := e.SG.B
	var rows []AllocRow
	add := func(op string, fn func(i int) error) error {
		r, err := countAllocs(n, fn)
		if err != nil {
			return fmt.Errorf("%s: %w", op, err)
		}
		r.Op = op
		rows = append(rows, r)
		return nil
	}
	steps := []struct {
		op string
		fn func(i int) error
	}{
		{"warm-up (not reported)", func(i int) error {
			if err := ScanAcquireShaped(bareAcq.QueryRowContext(ctx, args[i]...)); err != nil {
				return err
			}
			if err := ScanAcquireShaped(e.DB.QueryRowContext(ctx, BareAcquireSQL, args[i]...)); err != nil {
				return err
			}
			return ScanReleaseShaped(bareRel.QueryRowContext(ctx, args[i][1]))
		}},
		{"bare stmt.QueryRowContext+Scan (acquire's args and result types)", func(i int) error {
			return ScanAcquireShaped(bareAcq.QueryRowContext(ctx, args[i]...))
		}},
		{"bare db.QueryRowContext+Scan, unprepared (acquire's args and result types)", func(i int) error {
			return ScanAcquireShaped(e.DB.QueryRowContext(ctx, BareAcquireSQL, args[i]...))
		}},
		{"syncguard Acquire", func(i int) error {
			r, err := b.Acquire(ctx, keys[i], ttl)
			if err == nil && !r.OK {
				err = fmt.Errorf("not acquired")
			}
			ids[i] = r.LockID
			return err
		}},
		{"syncguard Extend", func(i int) error {
			r, err := b.Extend(ctx, ids[i], ttl)
			if err == nil && !r.OK {
				err = fmt.Errorf("not extended")
			}
			return err
		}},
		{"syncguard IsLocked", func(i int) error { _, err := b.IsLocked(ctx, keys[i]); return err }},
		{"syncguard LookupKey", func(i int) error { _, err := b.LookupKey(ctx, keys[i]); return err }},
		{"syncguard LookupID", func(i int) error { _, err := b.LookupID(ctx, ids[i]); return err }},
		{"bare stmt.QueryRowContext+Scan (release's args and result types)", func(i int) error {
			return ScanReleaseShaped(bareRel.QueryRowContext(ctx, ids[i]))
		}},
		{"syncguard Release", func(i int) error {
			r, err := b.Release(ctx, ids[i])
			if err == nil && !r.OK {
				err = fmt.Errorf("not released")
			}
			return err
		}},
		{"syncguard Acquire+Release", func(i int) error {
			r, err := b.Acquire(ctx, keys[i], ttl)
			if err != nil || !r.OK {
				return fmt.Errorf("acquire: %v %v", r.OK, err)
			}
			rr, err := b.Release(ctx, r.LockID)
			if err == nil && !rr.OK {
				err = fmt.Errorf("not released")
			}
			return err
		}},
	}
	for _, s := range steps {
		if err := add(s.op, s.fn); err != nil {
			return nil, err
		}
	}
	rows = rows[1:] // drop the warm-up
	get := func(op string) AllocRow {
		for _, r := range rows {
			if r.Op == op {
				return r
			}
		}
		return AllocRow{}
	}
	acq, bare := get("syncguard Acquire"), get("bare stmt.QueryRowContext+Scan (acquire's args and result types)")
	ratio := acq.AllocsPerOp / bare.AllocsPerOp
	return &AllocResult{Bench: "syncguard", Driver: e.Cfg.Driver, Workload: "client_allocs", Method: "sequential, MemStats deltas as in testing.B", Rows: rows,
		Targets: []Target{{Name: "allocs per Acquire / allocs per bare QueryRowContext+Scan", Value: ratio, Goal: "<= 1.5", Met: ratio <= 1.5}}}, nil
}
