package advisory

import (
	"context"
	"database/sql"
	_ "embed"
	"strconv"
	"strings"
	"time"
)

//go:embed sql/locks.sql
var sqlLocks string

// Entry is one row of pg_locks for an advisory lock: a session that holds
// it (Granted) or waits for it.
type Entry struct {
	// Key is the lock, decoded from classid, objid and objsubid. It carries
	// its declaration when the Client's Registry knows it.
	Key Key
	// Name is the registry name, or "" when the id is not known (see
	// Registry.NameOf).
	Name string
	// PID is the server process of the session; 0 for a prepared
	// transaction.
	PID int
	// Mode is "ExclusiveLock" (what this package takes) or "ShareLock".
	Mode string
	// Granted is true for a holder, false for a waiter.
	Granted bool
	// BlockedBy lists, for a waiter, the pids it waits for
	// (pg_blocking_pids): the holders, and waiters queued ahead of it.
	BlockedBy []int
	// WaitStart is when a waiter began to wait (PostgreSQL 14 and later;
	// zero otherwise and for holders).
	WaitStart time.Time
	// ApplicationName and State come from pg_stat_activity; PostgreSQL
	// shows them only for sessions of roles the monitoring role may see.
	ApplicationName, State string
	// XactStart and QueryStart are the session's transaction and statement
	// start times, when visible. For a waiter, QueryStart is about when the
	// wait began.
	XactStart, QueryStart time.Time
}

// Locks lists the advisory locks held and awaited in the current database,
// for every session, ordered by lock and then holders first. It reads
// pg_locks (cheap, but it briefly takes the lock manager's partition locks:
// poll it every few seconds, not in a loop).
func (l *Client) Locks(ctx context.Context) ([]Entry, error) {
	return l.list(ctx, "advisory.locks", false)
}

// Waiting lists only the waiting requests, each with the pids blocking it:
// the document's "Check Lock Wait Times" query.
func (l *Client) Waiting(ctx context.Context) ([]Entry, error) {
	return l.list(ctx, "advisory.waiting", true)
}

func (l *Client) list(ctx context.Context, op string, waitingOnly bool) (_ []Entry, err error) {
	if ctx.Err() != nil {
		return nil, l.wrap(ctx, op, Key{}, ctx.Err())
	}
	rows, err := l.db.QueryContext(ctx, sqlLocks, waitingOnly)
	if err != nil {
		return nil, l.wrap(ctx, op, Key{}, err)
	}
	defer rows.Close()
	var out []Entry
	for rows.Next() {
		var (
			classid, objid                    int64
			objsubid                          int32
			pid, waitStart, xactStart, qStart sql.NullInt64
			mode, blocking, appName, state    sql.NullString
			granted                           bool
		)
		if err := rows.Scan(&classid, &objid, &objsubid, &pid, &mode, &granted, &blocking, &waitStart,
			&appName, &state, &xactStart, &qStart); err != nil {
			return nil, l.wrap(ctx, op, Key{}, err)
		}
		k, ok := keyFromTag(classid, objid, objsubid)
		if !ok {
			continue
		}
		info := Entry{Key: k, PID: int(pid.Int64), Mode: mode.String, Granted: granted,
			ApplicationName: appName.String, State: state.String,
			WaitStart: msTime(waitStart), XactStart: msTime(xactStart), QueryStart: msTime(qStart)}
		if l.reg != nil {
			if d := l.reg.declOf(k); d != nil {
				info.Key.decl, info.Name = d, d.d.Name
			}
		}
		for _, f := range strings.Split(blocking.String, ",") {
			if n, err := strconv.Atoi(f); err == nil {
				info.BlockedBy = append(info.BlockedBy, n)
			}
		}
		out = append(out, info)
	}
	if err := rows.Err(); err != nil {
		return nil, l.wrap(ctx, op, Key{}, err)
	}
	return out, nil
}

func msTime(v sql.NullInt64) time.Time {
	if !v.Valid {
		return time.Time{}
	}
	return time.UnixMilli(v.Int64)
}
