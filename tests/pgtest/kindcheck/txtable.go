package kindcheck

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/syncguard/syncguard-go/internal/rules"
	"github.com/syncguard/syncguard-go/syncguard"
	"github.com/syncguard/syncguard-go/txguard"
)

// TxTable is a resource table (key, fence, writes) with txguard's fence
// guard on fence, written by holders of mutex leases of the lock table of
// its Config, each write in a transaction that proves the lease (Hold, or
// the SQL function in the write's own statement). Each write also reads
// the key's fence counter in the same transaction: a committed counter
// above the writer's fence means a newer holder's acquire committed, and
// a write accepted then is a write from a lost lease (a zombie write),
// whatever the check said.
type TxTable struct {
	name                string // unquoted
	table, hold, fences string // quoted
}

// SetupTxTable creates the resource table name, txguard's objects for
// cfg (whose TableName and FenceTableName must be set) and the fence
// guard. Safe to re-run.
func SetupTxTable(ctx context.Context, db *sql.DB, cfg *syncguard.Config, name string) (*TxTable, error) {
	if cfg.TableName == "" || cfg.FenceTableName == "" {
		return nil, errors.New("kindcheck: the TxTable's Config names no lock or fence table")
	}
	t := &TxTable{name: name, table: rules.QuoteIdent(name), hold: rules.QuoteIdent(cfg.TableName + "_hold"), fences: rules.QuoteIdent(cfg.FenceTableName)}
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+t.table+` ("key" text PRIMARY KEY, "fence" bigint NOT NULL, "writes" bigint NOT NULL)`); err != nil {
		return nil, err
	}
	if err := txguard.Setup(ctx, db, cfg); err != nil {
		return nil, err
	}
	if err := txguard.SetupFenceGuard(ctx, db, name, "fence"); err != nil {
		return nil, err
	}
	return t, nil
}

// Table is the quoted name of the resource table.
func (t *TxTable) Table() string { return t.table }

// Drop drops the resource table and the functions SetupTxTable created.
func (t *TxTable) Drop(ctx context.Context, db *sql.DB) {
	_, _ = db.ExecContext(ctx, `DROP TABLE IF EXISTS `+t.table)
	_, _ = db.ExecContext(ctx, `DROP FUNCTION IF EXISTS `+t.hold+`(text, text), `+rules.QuoteIdent(t.name+"_fence_guard")+`()`)
}

// TxOutcome is what became of one write.
type TxOutcome int

const (
	TxAccepted     TxOutcome = iota
	TxLeaseExpired           // Hold or the SQL function: the lease had expired
	TxLeaseGone              // ... no row of the lockId: taken over or released
	TxError                  // a fault; the outcome may be unknown
	TxViolation              // a zombie write or a broken check: see the detail
)

// Write writes fence to key's row in one transaction on db, proving the
// lease (lockID, fence) of key with g's Hold, or with viaSQL with the
// lock table's SQL function in the write's statement. serverMs is the
// server time Hold read (0 otherwise).
func (t *TxTable) Write(ctx context.Context, db *sql.DB, g *txguard.Guard, key, lockID string, fence int64, viaSQL bool) (out TxOutcome, detail string, serverMs int64) {
	k, err := rules.DeriveKey(key)
	if err != nil {
		return TxViolation, err.Error(), 0
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return TxError, err.Error(), 0
	}
	defer tx.Rollback() //nolint:errcheck // after Commit: no-op
	upsert := `INSERT INTO ` + t.table + ` AS r ("key", "fence", "writes") `
	if viaSQL {
		upsert += `SELECT $1::text, $2::bigint, 1 WHERE ` + t.hold + `($3::text, $1::text) = $2::bigint`
	} else {
		held, err := g.Hold(ctx, tx, key, lockID)
		if err != nil {
			out, detail := ClassifyLost(err)
			return out, detail, 0
		}
		if held.Fence != syncguard.Fence(fmt.Sprintf("%015d", fence)) {
			return TxViolation, fmt.Sprintf("Hold returned fence %s for a lease of fence %d", held.Fence, fence), 0
		}
		serverMs = held.Now.UnixMilli()
		upsert += `SELECT $1::text, $2::bigint, 1 WHERE $3::text IS NOT NULL`
	}
	upsert += ` ON CONFLICT ("key") DO UPDATE SET "fence" = EXCLUDED."fence", "writes" = r."writes" + 1`
	res, err := tx.ExecContext(ctx, upsert, key, fence, lockID)
	if err != nil {
		err = g.Classify(ctx, err)
		if errors.Is(err, txguard.ErrStaleFence) {
			return TxViolation, "the fence guard rejected a write whose lease check passed: " + err.Error(), 0
		}
		out, detail := ClassifyLost(err)
		return out, detail, 0
	}
	if n, err := res.RowsAffected(); err == nil && n != 1 {
		return TxViolation, fmt.Sprintf("the SQL function returned another fence than %d", fence), 0
	}
	var counter int64
	if err := tx.QueryRowContext(ctx, `SELECT "fence" FROM `+t.fences+` WHERE "fence_key" = $1`, k.Fence).Scan(&counter); err != nil {
		return TxError, err.Error(), 0
	}
	if counter > fence {
		return TxViolation, fmt.Sprintf("lease of fence %d passed the check after fence %d was committed (a newer holder)", fence, counter), 0
	}
	if err := tx.Commit(); err != nil {
		return TxError, err.Error(), 0
	}
	return TxAccepted, "", serverMs
}

// ClassifyLost reads a rejection: expired or gone, else a fault.
func ClassifyLost(err error) (TxOutcome, string) {
	switch {
	case !errors.Is(err, syncguard.ErrLockLost):
		return TxError, err.Error()
	case strings.Contains(err.Error(), "expired"):
		return TxLeaseExpired, ""
	}
	return TxLeaseGone, ""
}

// TxRow is one key's row of the resource table.
type TxRow struct{ Fence, Writes int64 }

// Rows reads the resource table.
func (t *TxTable) Rows(ctx context.Context, db *sql.DB) (map[string]TxRow, error) {
	rows, err := db.QueryContext(ctx, `SELECT "key", "fence", "writes" FROM `+t.table)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	m := map[string]TxRow{}
	for rows.Next() {
		var k string
		var r TxRow
		if err := rows.Scan(&k, &r.Fence, &r.Writes); err != nil {
			return nil, err
		}
		m[k] = r
	}
	return m, rows.Err()
}
