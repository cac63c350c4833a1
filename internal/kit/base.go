package kit

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/syncguard/syncguard-go/internal/errwrap"
	"github.com/syncguard/syncguard-go/internal/pooler"
	"github.com/syncguard/syncguard-go/internal/rules"
	"github.com/syncguard/syncguard-go/internal/stmtfunc"
	"github.com/syncguard/syncguard-go/internal/waiting"
	"github.com/syncguard/syncguard-go/syncguard"
)

// Base is what a lock kind's object (a Semaphore, an RWLock, a multilock
// Locker) shares with the others: its configuration, the running of its
// statements and the waking of its waiters. Safe for concurrent use.
type Base struct {
	Config
	Kind   string // "semaphore": in warnings
	DB     *sql.DB
	Waker  *waiting.Waker
	Window time.Duration // a waiter's queue rows live this long after an attempt
	// Inline: without OneShot, statements go unprepared all the same, their
	// arguments inlined (pooler.Statement). Else a statement is prepared
	// unless OneShot is set.
	Inline bool
	// ReadCommitted runs a statement once more in an explicit READ
	// COMMITTED transaction after a serialization failure or deadlock
	// (40001, 40P01: the session's default isolation level is higher, or
	// an extend met a concurrent delete); neither committed anything.
	ReadCommitted bool
	Funcs         string      // the prefix of the kind's statement functions (stmtfunc.Missing)
	Tables        []string    // the kind's tables, named in the error of a missing one (Wrap)
	noFuncs       atomic.Bool // the statement functions are missing or not granted
}

// NewBase returns the Base of c on db, with its Waker wired as
// syncguard's Backend wires its own: listening on NotifyDB when set,
// through the dialect's driver.Listener, polling without one.
func NewBase(kind string, db *sql.DB, c Config) *Base {
	b := &Base{Config: c, Kind: kind, DB: db, Window: 15 * time.Second}
	b.Waker = waiting.NewFor(waiting.Wiring{DB: db, NotifyDB: c.NotifyDB, Dialect: c.Dialect, Notify: b.notify,
		Logger: c.Logger, What: "syncguard " + kind})
	return b
}

// Close closes the LISTEN connection of the waiters, if one is open.
func (b *Base) Close() error {
	b.Waker.Close()
	return nil
}

// NotificationStatus is syncguard.Backend.NotificationStatus's answer
// for the kind's waiters.
func (b *Base) NotificationStatus(ctx context.Context) syncguard.NotificationStatus {
	st := b.Waker.Status(ctx)
	return syncguard.NotificationStatus{Active: st.Active, Reason: st.Reason}
}

// Capabilities are every kind's: fences, the server's clock.
var Capabilities = syncguard.Capabilities{Backend: "postgres", SupportsFencing: true, TimeAuthority: "server"}

// Wrap classifies err of op as syncguard does its own (errwrap.Wrap),
// saying what to do about a table that is missing, of an older version
// or not granted.
func (b *Base) Wrap(ctx context.Context, op string, err error) *syncguard.Error {
	e := errwrap.Wrap(ctx, op, b.Dialect, err)
	if e != nil && (e.SQLState == "42P01" || e.SQLState == "42703" || e.SQLState == "42501") {
		e.Msg += fmt.Sprintf(" (the %s's tables are missing, of an older version or not granted: run %[1]s.SetupSchema or apply %[1]s.SchemaSQL, and grant %s like the lock table)",
			b.Kind, strings.Join(b.Tables, ", "))
	}
	return e
}

// WrapKey is Wrap with the key (Error.Key, when not set) and lockId
// (Error.LockID) of the call.
func (b *Base) WrapKey(ctx context.Context, op, key, lockID string, err error) *syncguard.Error {
	e := b.Wrap(ctx, op, err)
	if e.Key == "" {
		e.Key = key
	}
	if e.LockID == "" {
		e.LockID = lockID
	}
	return e
}

// StartKey checks an acquire's key and ttl and ctx, before any I/O: the
// key's storage keys and the ttl in ms.
func (b *Base) StartKey(ctx context.Context, op, key string, ttl time.Duration) (rules.Key, int64, error) {
	k, err := CheckKey(op, key)
	if err != nil {
		return rules.Key{}, 0, err
	}
	ms, e := TTLMillis(op, ttl)
	if e == nil && ctx.Err() != nil {
		e = b.Wrap(ctx, op, ctx.Err())
	}
	if e != nil {
		e.Key = key
		return rules.Key{}, 0, e
	}
	return k, ms, nil
}

// StartID checks a release's or extend's lockId, ttl (with ttl: an
// extend's) and ctx, before any I/O: the ttl in ms.
func (b *Base) StartID(ctx context.Context, op, lockID string, ttl time.Duration, withTTL bool) (int64, error) {
	if e := CheckLockID(op, lockID); e != nil {
		return 0, e
	}
	var ms int64
	var e *syncguard.Error
	if withTTL {
		ms, e = TTLMillis(op, ttl)
	}
	if e == nil && ctx.Err() != nil {
		e = b.Wrap(ctx, op, ctx.Err())
	}
	if e != nil {
		e.LockID = lockID
		return 0, e
	}
	return ms, nil
}

// statement is q with args as the kind sends them: unprepared with
// OneShot or Inline (pooler.Statement), else as they are.
func (b *Base) statement(q string, args []any) (string, []any, error) {
	if b.OneShot == nil && !b.Inline {
		return q, args, nil
	}
	return pooler.Statement(b.OneShot, q, args)
}

// Query runs q on the pool as the kind sends its statements.
func (b *Base) Query(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	q, a, err := b.statement(q, args)
	if err != nil {
		return nil, err
	}
	return b.DB.QueryContext(ctx, q, a...)
}

// Row runs q and scans its one row into dest (sql.ErrNoRows: none), in
// READ COMMITTED once more after a serialization failure (ReadCommitted).
func (b *Base) Row(ctx context.Context, q string, args []any, dest ...any) error {
	err := b.row(ctx, b.DB, q, args, dest)
	if err == nil || !b.ReadCommitted || ctx.Err() != nil {
		return err
	}
	if st := b.Dialect.Inspect(err).SQLState; st != "40001" && st != "40P01" {
		return err
	}
	tx, err := b.DB.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // no-op after Commit
	if err := b.row(ctx, tx, q, args, dest); err != nil {
		return err
	}
	return tx.Commit()
}

func (b *Base) row(ctx context.Context, on pooler.Querier, q string, args, dest []any) error {
	q, a, err := b.statement(q, args)
	if err != nil {
		return err
	}
	return pooler.QueryRow(ctx, on, q, a, dest...)
}

// Call is Row through a statement function (call; "": none) while the
// functions serve, else the statement itself (plain). Once a call finds
// its function missing or not granted (a schema of an earlier version,
// EXECUTE revoked: nothing ran), the statements themselves from then on,
// with one warning.
func (b *Base) Call(ctx context.Context, call, plain string, args []any, dest ...any) error {
	if call == "" || b.noFuncs.Load() {
		return b.Row(ctx, plain, args, dest...)
	}
	err := b.Row(ctx, call, args, dest...)
	if err == nil || ctx.Err() != nil || !stmtfunc.Missing(b.Funcs, b.Dialect.Inspect(err).SQLState, err.Error()) {
		return err
	}
	if !b.noFuncs.Swap(true) {
		b.Logger.Warn(b.Kind+": the statement functions of this version are missing or not granted: run "+b.Kind+".SetupSchema (or apply "+
			b.Kind+".SchemaSQL); until then each statement is planned at every execution", slog.String("table", b.Table), slog.String("error", err.Error()))
	}
	return b.Row(ctx, plain, args, dest...)
}

// Each runs q and calls row for each of its rows, with the row's Scan;
// an error is op's (Wrap).
func (b *Base) Each(ctx context.Context, op, q string, args []any, row func(scan func(dest ...any) error) error) error {
	if err := ctx.Err(); err != nil {
		return b.Wrap(ctx, op, err)
	}
	rows, err := b.Query(ctx, q, args...)
	if err != nil {
		return b.Wrap(ctx, op, err)
	}
	return EachRow(rows, func(err error) error { return b.Wrap(ctx, op, err) }, row)
}

// EachRow calls row for each of rows (then closed), with its Scan; wrap
// makes the error of a scan or of rows.
func EachRow(rows *sql.Rows, wrap func(error) error, row func(scan func(dest ...any) error) error) error {
	defer rows.Close()
	for rows.Next() {
		if err := row(rows.Scan); err != nil {
			return wrap(err)
		}
	}
	if err := rows.Err(); err != nil {
		return wrap(err)
	}
	return nil
}

// notify sends a notification through NotifyDB when it is set, else
// through the pool as the kind sends its statements.
func (b *Base) notify(ctx context.Context, channel, payload string) error {
	db, q, a, err := b.DB, waiting.NotifySQL, []any{channel, payload}, error(nil)
	if b.NotifyDB != nil {
		db = b.NotifyDB
	} else if q, a, err = b.statement(q, a); err != nil {
		return err
	}
	_, err = db.ExecContext(ctx, q, a...)
	return err
}

// Woke wakes the waiters a statement granted (payloads, comma-separated):
// this process's at once, and with send the others by a notification on
// channels[i] (the last one for the rest: one key's channel), a hint sent
// after the statement's commit (NotifyDB, or the commit could not send
// it); else the statement's commit sent it.
func (b *Base) Woke(ctx context.Context, payloads string, channels []string, send bool) {
	if payloads == "" {
		return
	}
	for i, p := range strings.Split(payloads, ",") {
		b.Waker.Wake(p)
		if send && len(channels) > 0 && channels[min(i, len(channels)-1)] != "" {
			_ = b.notify(ctx, channels[min(i, len(channels)-1)], p)
		}
	}
}

// Background runs release detached (a lease or a waiter's place whose
// acquire may have committed unanswered, after the caller gave up on it),
// again after an error until ReleaseTimeout; a lease it misses expires at
// its TTL.
func (b *Base) Background(release func(ctx context.Context) error) {
	go func() {
		deadline := time.Now().Add(b.ReleaseTimeout)
		for wait := 50 * time.Millisecond; time.Now().Before(deadline); wait *= 2 {
			ctx, cancel := context.WithDeadline(context.Background(), deadline)
			err := release(ctx)
			cancel()
			if err == nil {
				return
			}
			time.Sleep(wait)
		}
	}()
}

// WindowMs is a queued attempt's window in ms: Window, or less when ctx
// ends sooner.
func (b *Base) WindowMs(ctx context.Context) int64 {
	w := b.Window
	if dl, ok := ctx.Deadline(); ok {
		w = max(min(w, time.Until(dl)), time.Millisecond)
	}
	return w.Milliseconds()
}

// OutcomeUnknown reports whether a statement that failed with e may have
// committed (syncguard's rule: its context ended, or the connection
// failed without an answer).
func OutcomeUnknown(ctx context.Context, e *syncguard.Error) bool {
	st := e.SQLState
	return ctx.Err() != nil || (e.Code == syncguard.ErrServiceUnavailable || e.Code == syncguard.ErrNetworkTimeout) &&
		(st == "" || strings.HasPrefix(st, "08") || strings.HasPrefix(st, "57P"))
}

// RetryIn is how long until a lease that expires at ms (server time) is
// no longer live, seen at now.
func RetryIn(at, now int64) time.Duration {
	return max(time.Duration(at+rules.ToleranceMs+1-now)*time.Millisecond, 0)
}

// Since is how long ago at was, seen at now (both server ms); 0 for an
// invalid at.
func Since(at sql.NullInt64, now int64) time.Duration {
	if !at.Valid {
		return 0
	}
	return time.Duration(max(now-at.Int64, 0)) * time.Millisecond
}

// Fence is n as a syncguard.Fence.
func Fence(n int64) syncguard.Fence {
	f, _ := rules.FormatFence(n)
	return syncguard.Fence(f)
}

// SetKey sets the Key of err, a *syncguard.Error, to key; err is returned.
func SetKey(err error, key string) error {
	if e, ok := err.(*syncguard.Error); ok && e != nil {
		e.Key = key
	}
	return err
}

// NotifyLater sends a hand-off's wake-up after its commit, detached
// (NotifyDB): best effort, the waiter's next attempt finds it anyway.
func (b *Base) NotifyLater(channel, payload string) {
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), b.ReleaseTimeout)
		defer cancel()
		_ = b.notify(ctx, channel, payload)
	}()
}

// Revoke releases each lease of hs (read by the kind: its holders) by its
// lockId, as its holder's own release would, and returns those it ended:
// one that ended by itself meanwhile, and a later holder, are left alone.
func Revoke[H any](ctx context.Context, hs []H, release func(ctx context.Context, h H) (syncguard.ReleaseResult, error)) ([]H, error) {
	var out []H
	for _, h := range hs {
		r, err := release(ctx, h)
		if err != nil {
			return out, err
		}
		if r.OK {
			out = append(out, h)
		}
	}
	return out, nil
}

// List runs q and makes an item of each of its rows (row): [] when none.
func List[T any](ctx context.Context, b *Base, op, q string, args []any, row func(scan func(dest ...any) error) (T, error)) ([]T, error) {
	out := []T{}
	err := b.Each(ctx, op, q, args, func(scan func(dest ...any) error) error {
		t, err := row(scan)
		out = append(out, t)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
