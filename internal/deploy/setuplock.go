package deploy

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"
)

// SetupLockTimeout bounds a setup's wait for its advisory lock and for the
// catalog's locks (another setup, or any session holding the id).
const SetupLockTimeout = 30 * time.Second

// SetupLockError is a setup that did not get its advisory lock (its
// lock_timeout ran out, or its context ended): Err is the driver's error.
type SetupLockError struct {
	ID  int64
	Err error
}

func (e *SetupLockError) Error() string { return e.Err.Error() }
func (e *SetupLockError) Unwrap() error { return e.Err }

// SetupLock takes a setup's advisory lock id in tx, waiting at most
// timeout: lock_timeout is set first, for the lock and the DDL after it.
// A failure to get the lock is a *SetupLockError (see SetupLockHolders).
func SetupLock(ctx context.Context, tx *sql.Tx, id int64, timeout time.Duration) error {
	if _, err := tx.ExecContext(ctx, fmt.Sprintf("SET LOCAL lock_timeout = '%dms'", timeout.Milliseconds())); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, fmt.Sprintf("SELECT pg_advisory_xact_lock(%d)", id)); err != nil {
		return &SetupLockError{ID: id, Err: err}
	}
	return nil
}

// SetupLockHolders says who holds the advisory lock of a setup that err
// (from SetupLock) did not get, for its message: "" when err is not a
// *SetupLockError. One query on db, made after the setup's own context
// (which may have ended it) for at most 5 s.
func SetupLockHolders(ctx context.Context, db *sql.DB, err error) string {
	var le *SetupLockError
	if !errors.As(err, &le) || db == nil {
		return ""
	}
	qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	// A bigint advisory key is (classid, objid) = its high and low 32
	// bits, objsubid 1. A prepared transaction's lock has no pid.
	rows, qerr := db.QueryContext(qctx, fmt.Sprintf(`SELECT coalesce(l."pid"::text, ''), coalesce(a."usename"::text, ''),
  coalesce(a."application_name", ''), coalesce(a."state", '')
FROM pg_catalog.pg_locks AS l
LEFT JOIN pg_catalog.pg_stat_activity AS a ON a."pid" = l."pid"
WHERE l."locktype" = 'advisory' AND l."granted" AND l."classid" = %d AND l."objid" = %d AND l."objsubid" = 1`,
		uint32(uint64(le.ID)>>32), uint32(uint64(le.ID))))
	if qerr != nil {
		return fmt.Sprintf("the setup did not get its advisory lock %d (it waits at most %v), held by another session (pg_locks could not be read: %v)", le.ID, SetupLockTimeout, qerr)
	}
	defer rows.Close()
	var who []string
	for rows.Next() {
		var pid, role, app, state string
		if rows.Scan(&pid, &role, &app, &state) != nil {
			continue
		}
		switch {
		case pid == "":
			who = append(who, "a prepared transaction (pg_prepared_xacts; ROLLBACK PREPARED ends it)")
		default:
			d := []string{"pid " + pid}
			for _, f := range [][2]string{{"role", role}, {"application", app}, {"state", state}} {
				if f[1] != "" {
					d = append(d, f[0]+" "+f[1])
				}
			}
			who = append(who, strings.Join(d, ", "))
		}
	}
	if len(who) == 0 {
		return fmt.Sprintf("the setup did not get its advisory lock %d (it waits at most %v), held by another session then (released since: run the setup again)", le.ID, SetupLockTimeout)
	}
	return fmt.Sprintf("the setup did not get its advisory lock %d (it waits at most %v), held by %s (pg_terminate_backend ends a stuck session)",
		le.ID, SetupLockTimeout, strings.Join(who, "; "))
}
