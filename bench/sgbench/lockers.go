package sgbench

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/syncguard/syncguard-go/internal/rules"
	"github.com/syncguard/syncguard-go/syncguard"
)

// Locker is one implementation of the lock round trip under comparison:
// syncguard itself, the spec's reference transactions, or the durable floor.
type Locker interface {
	// Acquire tries once. ok == false means the key was held.
	Acquire(ctx context.Context, key string, ttl time.Duration) (id string, ok bool, err error)
	// Release releases what Acquire returned.
	Release(ctx context.Context, id string) (bool, error)
	// Extend renews what Acquire returned.
	Extend(ctx context.Context, id string, ttl time.Duration) (bool, error)
	// Read is the workload-5 read of key (or id).
	Read(ctx context.Context, key, id string) error
}

// Table names used by the benchmark. Every table is dropped and created
// again by Setup, so runs never see each other's rows.
const (
	SGTable         = "sgbench_locks"
	SGFenceTable    = "sgbench_fences"
	RefTable        = "sgbench_ref_locks"
	RefFenceTable   = "sgbench_ref_fences"
	FloorTable      = "sgbench_floor"
	StoreTable      = "sgbench_store_locks"
	StoreFenceTable = "sgbench_store_fences"
)

// AllTables lists every table the benchmark creates.
var AllTables = []string{SGTable, SGFenceTable, RefTable, RefFenceTable, FloorTable, StoreTable, StoreFenceTable}

// DropTables drops the given tables if they exist.
func DropTables(ctx context.Context, db *sql.DB, tables ...string) error {
	for _, t := range tables {
		if _, err := db.ExecContext(ctx, "DROP TABLE IF EXISTS "+rules.QuoteIdent(t)); err != nil {
			return fmt.Errorf("drop %s: %w", t, err)
		}
	}
	return nil
}

// SetupTables creates fresh benchmark tables: syncguard's and the reference
// design's (both through syncguard.SetupSchema, so they have the spec's
// schema and indexes) and the floor's scratch table.
func SetupTables(ctx context.Context, db *sql.DB) error {
	if err := DropTables(ctx, db, SGTable, SGFenceTable, RefTable, RefFenceTable, FloorTable); err != nil {
		return err
	}
	for _, c := range []*syncguard.Config{
		{TableName: SGTable, FenceTableName: SGFenceTable},
		{TableName: RefTable, FenceTableName: RefFenceTable},
	} {
		if err := syncguard.SetupSchema(ctx, db, c); err != nil {
			return err
		}
	}
	_, err := db.ExecContext(ctx, `CREATE TABLE `+rules.QuoteIdent(FloorTable)+` (k text PRIMARY KEY, v text NOT NULL)`)
	return err
}

// ---------------------------------------------------------------- syncguard

// SG adapts *syncguard.Backend to Locker. ReadKind picks what Read does:
// "isLocked", "lookupKey" or "lookupID".
type SG struct {
	B        *syncguard.Backend
	ReadKind string
}

// Lockers are the lock designs the comparisons measure against each other,
// prepared on one pool: syncguard, the spec's reference design and the
// floor.
type Lockers struct {
	SG    *SG
	Ref   *Reference
	Floor *Floor
}

// NewLockers prepares the three on db (whose tables SetupTables made).
// Close them with Close.
func NewLockers(ctx context.Context, db *sql.DB) (*Lockers, error) {
	sg, err := NewSG(db)
	if err != nil {
		return nil, err
	}
	ref, err := NewReference(ctx, db)
	if err != nil {
		return nil, err
	}
	floor, err := NewFloor(ctx, db)
	if err != nil {
		ref.Close()
		return nil, err
	}
	return &Lockers{SG: sg, Ref: ref, Floor: floor}, nil
}

// Close closes the reference's and the floor's prepared statements.
func (l *Lockers) Close() {
	l.Ref.Close()
	l.Floor.Close()
}

// NewSG returns a syncguard backend on the benchmark tables.
func NewSG(db *sql.DB) (*SG, error) {
	b, err := syncguard.New(db, &syncguard.Config{TableName: SGTable, FenceTableName: SGFenceTable})
	if err != nil {
		return nil, err
	}
	return &SG{B: b}, nil
}

func (s *SG) Acquire(ctx context.Context, key string, ttl time.Duration) (string, bool, error) {
	r, err := s.B.Acquire(ctx, key, ttl)
	return r.LockID, r.OK, err
}

func (s *SG) Release(ctx context.Context, id string) (bool, error) {
	r, err := s.B.Release(ctx, id)
	return r.OK, err
}

func (s *SG) Extend(ctx context.Context, id string, ttl time.Duration) (bool, error) {
	r, err := s.B.Extend(ctx, id, ttl)
	return r.OK, err
}

func (s *SG) Read(ctx context.Context, key, id string) error {
	switch s.ReadKind {
	case "lookupKey":
		info, err := s.B.LookupKey(ctx, key)
		if err == nil && info == nil {
			err = fmt.Errorf("lookupKey: lock on %q not found", key)
		}
		return err
	case "lookupID":
		info, err := s.B.LookupID(ctx, id)
		if err == nil && info == nil {
			err = fmt.Errorf("lookupID: lock not found")
		}
		return err
	default:
		ok, err := s.B.IsLocked(ctx, key)
		if err == nil && !ok {
			err = fmt.Errorf("isLocked: %q not locked", key)
		}
		return err
	}
}

// With returns a copy of s whose Read does kind.
func (s *SG) With(kind string) *SG { return &SG{B: s.B, ReadKind: kind} }

// ---------------------------------------------------------------- reference

// Reference is the spec's reference design ("Canonical Fence Increment
// Pattern", "Release Operation Requirements", the extend transaction),
// written out literally as one database/sql transaction per operation with
// one statement per step:
//
//	acquire: BEGIN; SELECT now(); SELECT pg_advisory_xact_lock(hashtext(key));
//	         SELECT ... WHERE key = $1 FOR UPDATE; [live: COMMIT, "locked"]
//	         INSERT fence ... ON CONFLICT DO NOTHING; UPDATE fence ... RETURNING;
//	         INSERT lock ... ON CONFLICT (key) DO UPDATE; COMMIT
//	release: BEGIN; SELECT now(); SELECT ... WHERE lock_id = $1 FOR UPDATE;
//	         [not ours or not live: COMMIT]; DELETE ... WHERE key = $1; COMMIT
//	extend:  BEGIN; SELECT now(); SELECT ... FOR UPDATE; UPDATE ...; COMMIT
//
// Every statement is prepared once per connection (as syncguard's are), so
// each costs one round trip with both drivers: the comparison charges the
// reference design for its round trips and commits, not for a driver detail.
// Keys, fence keys and lockIds are derived exactly as syncguard derives them.
type Reference struct {
	db                                        *sql.DB
	now, adv, sel, fenceIns, fenceUpd, upsert *sql.Stmt
	selByID, del, extUpd, read                *sql.Stmt
}

// NewReference prepares the reference design's statements on its tables.
func NewReference(ctx context.Context, db *sql.DB) (*Reference, error) {
	l, f := rules.QuoteIdent(RefTable), rules.QuoteIdent(RefFenceTable)
	r := &Reference{db: db}
	for _, p := range []struct {
		dst **sql.Stmt
		sql string
	}{
		{&r.now, `SELECT ` + rules.NowMsSQL}, // the transaction's first statement: now() of the reference
		{&r.adv, `SELECT pg_advisory_xact_lock(hashtext($1))`},
		{&r.sel, `SELECT lock_id, expires_at_ms FROM ` + l + ` WHERE key = $1 FOR UPDATE`},
		{&r.fenceIns, `INSERT INTO ` + f + ` (fence_key, fence, key_debug) VALUES ($1, 0, $2) ON CONFLICT (fence_key) DO NOTHING`},
		{&r.fenceUpd, `UPDATE ` + f + ` SET fence = fence + 1 WHERE fence_key = $1 RETURNING fence`},
		{&r.upsert, `INSERT INTO ` + l + ` (key, lock_id, expires_at_ms, acquired_at_ms, fence, user_key)
VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT (key) DO UPDATE SET lock_id = EXCLUDED.lock_id, expires_at_ms = EXCLUDED.expires_at_ms,
  acquired_at_ms = EXCLUDED.acquired_at_ms, fence = EXCLUDED.fence, user_key = EXCLUDED.user_key`},
		{&r.selByID, `SELECT key, lock_id, expires_at_ms FROM ` + l + ` WHERE lock_id = $1 FOR UPDATE`},
		{&r.del, `DELETE FROM ` + l + ` WHERE key = $1`},
		{&r.extUpd, `UPDATE ` + l + ` SET expires_at_ms = $2 WHERE key = $1`},
		{&r.read, `SELECT lock_id, expires_at_ms, acquired_at_ms, fence, user_key, ` + rules.NowMsSQL + `
FROM ` + l + ` WHERE key = $1`},
	} {
		st, err := db.PrepareContext(ctx, p.sql)
		if err != nil {
			return nil, fmt.Errorf("reference: prepare %q: %w", p.sql, err)
		}
		*p.dst = st
	}
	return r, nil
}

// Close closes the prepared statements.
func (r *Reference) Close() {
	for _, s := range []*sql.Stmt{r.now, r.adv, r.sel, r.fenceIns, r.fenceUpd, r.upsert, r.selByID, r.del, r.extUpd, r.read} {
		if s != nil {
			s.Close()
		}
	}
}

func (r *Reference) Acquire(ctx context.Context, key string, ttl time.Duration) (id string, ok bool, err error) {
	norm, err := rules.NormalizeKey(key)
	if err != nil {
		return "", false, err
	}
	storage, fenceKey, err := rules.StorageKeys(norm)
	if err != nil {
		return "", false, err
	}
	tx, err := r.db.BeginTx(ctx, nil)
	if err != nil {
		return "", false, err
	}
	defer func() {
		if err != nil {
			tx.Rollback() //nolint:errcheck
		}
	}()
	var nowMs int64
	if err = tx.StmtContext(ctx, r.now).QueryRowContext(ctx).Scan(&nowMs); err != nil {
		return "", false, err
	}
	if _, err = tx.StmtContext(ctx, r.adv).ExecContext(ctx, storage); err != nil {
		return "", false, err
	}
	var curID string
	var curExp int64
	switch err = tx.StmtContext(ctx, r.sel).QueryRowContext(ctx, storage).Scan(&curID, &curExp); {
	case err == sql.ErrNoRows:
		err = nil
	case err != nil:
		return "", false, err
	case rules.IsLive(curExp, nowMs):
		err = tx.Commit() // the reference returns from sql.begin(): commit
		return "", false, err
	}
	if _, err = tx.StmtContext(ctx, r.fenceIns).ExecContext(ctx, fenceKey, norm); err != nil {
		return "", false, err
	}
	var fence int64
	if err = tx.StmtContext(ctx, r.fenceUpd).QueryRowContext(ctx, fenceKey).Scan(&fence); err != nil {
		return "", false, err
	}
	if fence > rules.FenceMax {
		err = fmt.Errorf("reference: fence %d above maximum", fence)
		return "", false, err
	}
	f, err := rules.FormatFence(fence)
	if err != nil {
		return "", false, err
	}
	id = rules.GenerateLockID()
	if _, err = tx.StmtContext(ctx, r.upsert).ExecContext(ctx, storage, id, nowMs+ttl.Milliseconds(), nowMs, f, norm); err != nil {
		return "", false, err
	}
	if err = tx.Commit(); err != nil {
		return "", false, err
	}
	return id, true, nil
}

// lockedRow runs the common head of release and extend: BEGIN, now(),
// SELECT ... WHERE lock_id = $1 FOR UPDATE, and the ownership and liveness
// checks. tx is nil when the transaction was already finished.
func (r *Reference) lockedRow(ctx context.Context, id string) (tx *sql.Tx, key string, nowMs int64, err error) {
	if err := rules.ValidateLockID(id); err != nil {
		return nil, "", 0, err
	}
	tx, err = r.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, "", 0, err
	}
	if err = tx.StmtContext(ctx, r.now).QueryRowContext(ctx).Scan(&nowMs); err != nil {
		tx.Rollback() //nolint:errcheck
		return nil, "", 0, err
	}
	var gotID string
	var exp int64
	err = tx.StmtContext(ctx, r.selByID).QueryRowContext(ctx, id).Scan(&key, &gotID, &exp)
	if err == sql.ErrNoRows || (err == nil && (gotID != id || !rules.IsLive(exp, nowMs))) {
		return nil, "", 0, tx.Commit()
	}
	if err != nil {
		tx.Rollback() //nolint:errcheck
		return nil, "", 0, err
	}
	return tx, key, nowMs, nil
}

func (r *Reference) Release(ctx context.Context, id string) (bool, error) {
	tx, key, _, err := r.lockedRow(ctx, id)
	if tx == nil {
		return false, err
	}
	if _, err := tx.StmtContext(ctx, r.del).ExecContext(ctx, key); err != nil {
		tx.Rollback() //nolint:errcheck
		return false, err
	}
	return true, tx.Commit()
}

func (r *Reference) Extend(ctx context.Context, id string, ttl time.Duration) (bool, error) {
	tx, key, nowMs, err := r.lockedRow(ctx, id)
	if tx == nil {
		return false, err
	}
	if _, err := tx.StmtContext(ctx, r.extUpd).ExecContext(ctx, key, nowMs+ttl.Milliseconds()); err != nil {
		tx.Rollback() //nolint:errcheck
		return false, err
	}
	return true, tx.Commit()
}

// Read is the spec's key lookup: SELECT * FROM locks WHERE key = $1, with
// the server time read in the same statement (one round trip).
func (r *Reference) Read(ctx context.Context, key, _ string) error {
	norm, err := rules.NormalizeKey(key)
	if err != nil {
		return err
	}
	storage, _, err := rules.StorageKeys(norm)
	if err != nil {
		return err
	}
	var (
		id, fence, userKey string
		exp, acq, now      int64
	)
	if err := r.read.QueryRowContext(ctx, storage).Scan(&id, &exp, &acq, &fence, &userKey, &now); err != nil {
		return err
	}
	if !rules.IsLive(exp, now) {
		return fmt.Errorf("reference read: %q not live", key)
	}
	return nil
}

// ---------------------------------------------------------------- floor

// Floor is the durable floor: autocommitted single-row writes on a scratch
// table with a text primary key, one prepared statement each. "Acquire" is
// INSERT ... ON CONFLICT DO NOTHING (ok when a row was inserted), "release"
// is DELETE by primary key, "extend" is UPDATE by primary key and "read" is
// SELECT by primary key. Each write is one commit and one WAL flush, the
// least any durable lock can cost.
type Floor struct {
	ins, del, upd, read, one *sql.Stmt
	// Select1 makes Read a bare SELECT 1 round trip.
	Select1 bool
}

// NewFloor prepares the floor's statements.
func NewFloor(ctx context.Context, db *sql.DB) (*Floor, error) {
	t := rules.QuoteIdent(FloorTable)
	f := &Floor{}
	for _, p := range []struct {
		dst **sql.Stmt
		sql string
	}{
		{&f.ins, `INSERT INTO ` + t + ` (k, v) VALUES ($1, $2) ON CONFLICT (k) DO NOTHING`},
		{&f.del, `DELETE FROM ` + t + ` WHERE k = $1`},
		{&f.upd, `UPDATE ` + t + ` SET v = $2 WHERE k = $1`},
		{&f.read, `SELECT v FROM ` + t + ` WHERE k = $1`},
		{&f.one, `SELECT 1`},
	} {
		st, err := db.PrepareContext(ctx, p.sql)
		if err != nil {
			return nil, fmt.Errorf("floor: prepare %q: %w", p.sql, err)
		}
		*p.dst = st
	}
	return f, nil
}

// Close closes the prepared statements.
func (f *Floor) Close() {
	for _, s := range []*sql.Stmt{f.ins, f.del, f.upd, f.read, f.one} {
		if s != nil {
			s.Close()
		}
	}
}

// WithSelect1 returns a copy of f whose Read is SELECT 1.
func (f *Floor) WithSelect1() *Floor { c := *f; c.Select1 = true; return &c }

func (f *Floor) Acquire(ctx context.Context, key string, _ time.Duration) (string, bool, error) {
	res, err := f.ins.ExecContext(ctx, key, rules.GenerateLockID())
	if err != nil {
		return "", false, err
	}
	n, err := res.RowsAffected()
	return key, n == 1, err
}

func (f *Floor) Release(ctx context.Context, key string) (bool, error) {
	res, err := f.del.ExecContext(ctx, key)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

func (f *Floor) Extend(ctx context.Context, key string, _ time.Duration) (bool, error) {
	res, err := f.upd.ExecContext(ctx, key, rules.GenerateLockID())
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

func (f *Floor) Read(ctx context.Context, key, _ string) error {
	if f.Select1 {
		var one int
		return f.one.QueryRowContext(ctx).Scan(&one)
	}
	var v string
	return f.read.QueryRowContext(ctx, key).Scan(&v)
}
