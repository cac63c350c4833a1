package semaphore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/syncguard/syncguard-go/driver"
	"github.com/syncguard/syncguard-go/internal/errwrap"
	"github.com/syncguard/syncguard-go/internal/kit"
	"github.com/syncguard/syncguard-go/internal/rules"
	"github.com/syncguard/syncguard-go/internal/stmtfunc"
	"github.com/syncguard/syncguard-go/internal/waiting"
	"github.com/syncguard/syncguard-go/syncguard"
)

// MaxPermits is the largest number of permits a key may have.
const MaxPermits = 10_000

// ErrPermitsMismatch is the cause (errors.Is) of the InvalidArgument
// error of an acquire whose number of permits differs from the one the
// key was created with: nothing was taken.
var ErrPermitsMismatch = errors.New("semaphore: the key was created with another number of permits")

// staleRetries bounds how often one Acquire (or attempt) runs its
// statement again after losing the key's compare-and-set to a concurrent
// take. A release needs no retry (release.sql).
const staleRetries = 8

// Semaphore is a PostgreSQL counting semaphore: Permits permits per key,
// each a lease with its own slot and fence. It implements
// syncguard.LockBackend and syncguard.Queuer, so syncguard.Lock and
// WithLock (or Semaphore.Lock, which also returns the permit's slot) wait
// for a permit in FIFO order and give a *syncguard.Lease with TTL,
// AutoExtend, loss signal and release. Safe for concurrent use.
type Semaphore struct {
	db       *sql.DB
	table    string
	permits  int
	dialect  driver.Dialect
	identity string
	notifyDB *sql.DB
	logger   *slog.Logger
	relTO    time.Duration
	prefix   string
	window   time.Duration

	acquireSQL, releaseSQL, extendSQL, holdersSQL, listSQL string
	acquireFn, releaseFn                                   string      // the calls of the statement functions (schema.go's funcs)
	noFuncs                                                atomic.Bool // they are missing or not granted: the statements are sent themselves
	oneShot                                                []any       // the dialect's driver.OneShot arguments, with Config.DisablePrepare

	waker  *waiting.Waker
	slots  sync.Map // lockID -> slot, for Slot
	grants grants   // hand-offs to this Semaphore's waiters, for their next attempt
}

// New returns a Semaphore of permits permits per key on db, with the
// tables that cfg names (see Tables; nil cfg: the defaults). Read from
// cfg: TableName, Dialect, Identity (the holder identity stored with each
// permit), NotifyDB, Logger, ReleaseTimeout and DisablePrepare, as
// syncguard.New reads them. Statements are sent with arguments as the
// driver does by default; behind a transaction-mode pooler set
// DisablePrepare (pgx: each statement unprepared, one round trip) or, for
// lib/pq, binary_parameters=yes in the DSN. A key gets its number of permits at its first acquire, from the
// Semaphore that makes it; an acquire through a Semaphore with another
// number fails with ErrPermitsMismatch (InvalidArgument) and takes
// nothing. New does no I/O; bad input is an InvalidArgument
// *syncguard.Error.
func New(db *sql.DB, cfg *syncguard.Config, permits int) (*Semaphore, error) {
	const op = "semaphore.new"
	c, err := kit.Resolve(op, db, cfg)
	if err != nil {
		return nil, err
	}
	if permits < 1 || permits > MaxPermits {
		return nil, invalidArg(op, fmt.Sprintf("permits must be between 1 and %d, got %d", MaxPermits, permits))
	}
	table := c.Table
	s := &Semaphore{db: db, table: table, permits: permits, dialect: c.Dialect, identity: c.Identity,
		notifyDB: c.NotifyDB, logger: c.Logger, relTO: c.ReleaseTimeout, prefix: channelPrefix(table),
		window:     15 * time.Second,
		acquireSQL: stripComments(render("acquire.sql", table)), releaseSQL: stripComments(render("release.sql", table)),
		extendSQL: stripComments(render("extend.sql", table)), holdersSQL: stripComments(render("holders.sql", table)),
		listSQL: stripComments(render("list.sql", table))}
	af, rf := funcs(table)
	s.acquireFn, s.releaseFn = af.Call, rf.Call
	if c.DisablePrepare {
		s.oneShot = c.OneShot
	}
	s.waker = s.newWaker()
	return s, nil
}

// Permits returns the number of permits per key of s.
func (s *Semaphore) Permits() int { return s.permits }

// Capabilities implements syncguard.LockBackend: every permit carries a
// fence (its slot's), expiry is on the server's clock.
func (s *Semaphore) Capabilities() syncguard.Capabilities {
	return syncguard.Capabilities{Backend: "postgres", SupportsFencing: true, TimeAuthority: "server"}
}

// Close closes the LISTEN connection that wakes waiting Lock calls, if
// one is open; not the *sql.DB. The Semaphore stays usable: waits poll.
func (s *Semaphore) Close() error {
	s.waker.Close()
	return nil
}

// Slot returns the slot (1..Permits) of the permit lockID, as this
// Semaphore took or was handed it, and whether it knows it: a permit
// taken through another Semaphore value or process is found with
// LookupPermit. The slot with the key names the fence counter that the
// permit's fence belongs to (see FenceKey).
func (s *Semaphore) Slot(lockID string) (int, bool) {
	v, ok := s.slots.Load(lockID)
	if !ok {
		return 0, false
	}
	return v.(int), true
}

// Acquire implements syncguard.Locker: one attempt to take a permit of
// key for ttl. OK == false (ReasonLocked) when every permit is held or an
// earlier waiter is queued; RetryIn is then how long until the first
// permit's expiry (0 when a permit is free but waiters come first).
func (s *Semaphore) Acquire(ctx context.Context, key string, ttl time.Duration) (syncguard.AcquireResult, error) {
	return s.acquire(ctx, key, ttl, s.identity, nil)
}

// acquireRow is what acquire.sql returns.
type acquireRow struct {
	state                    string
	slot                     sql.NullInt64
	expires, acquired, fence sql.NullInt64
	stale, exhausted, free   bool
	permits, firstExpiry     sql.NullInt64
	ahead, now               int64
}

func (s *Semaphore) acquire(ctx context.Context, key string, ttl time.Duration, ident string, w *waiter) (syncguard.AcquireResult, error) {
	const op = "acquire"
	k, err := rules.DeriveKey(key)
	if err != nil {
		return syncguard.AcquireResult{}, ruleErr(op, key, err)
	}
	ttlMs := ttl.Milliseconds()
	if ttlMs < 1 {
		e := invalidArg(op, fmt.Sprintf("ttl must be at least 1ms, got %v", ttl))
		e.Key = key
		return syncguard.AcquireResult{}, e
	}
	if err := ctx.Err(); err != nil {
		return syncguard.AcquireResult{}, s.wrap(ctx, op, key, err)
	}
	lockID, window, notified := rules.GenerateLockID(), int64(0), false
	if w != nil {
		lockID = w.LockID
		win := s.window
		if dl, ok := ctx.Deadline(); ok {
			win = max(min(win, time.Until(dl)), time.Millisecond)
		}
		if g, ok := s.grants.take(lockID); ok {
			if res, ok := s.granted(k.Norm, lockID, ttlMs, g); ok {
				s.grants.done(lockID)
				return res, nil
			}
		}
		s.grants.expect(lockID)
		window, notified = win.Milliseconds(), w.join(ttlMs)
	}
	var idArg any
	if ident != "" {
		idArg = ident
	}
	var r acquireRow
	for i := 0; ; i++ {
		r = acquireRow{}
		err = s.run(ctx, s.acquireFn, s.acquireSQL, []any{k.Storage, lockID, s.permits, k.Norm, ttlMs, window, notified, idArg},
			&r.state, &r.slot, &r.expires, &r.acquired, &r.fence, &r.stale, &r.exhausted, &r.permits, &r.firstExpiry, &r.free, &r.ahead, &r.now)
		if err != nil || !r.stale || i >= staleRetries || ctx.Err() != nil {
			break
		}
	}
	if err == nil && ctx.Err() != nil {
		err = ctx.Err()
	}
	if err != nil {
		if w == nil {
			s.releaseInBackground(lockID) // it may have committed unanswered
		} else {
			w.Unknown.Store(true)
		}
		return syncguard.AcquireResult{}, s.wrap(ctx, op, key, err)
	}
	switch {
	case r.state == "mismatch":
		return syncguard.AcquireResult{}, &syncguard.Error{Op: op, Code: syncguard.CodeInvalidArgument, Key: key, Err: ErrPermitsMismatch,
			Msg: fmt.Sprintf("this key is a semaphore of %d permits, not %d (the first acquire of a key fixes its number of permits); nothing was taken", r.permits.Int64, s.permits)}
	case r.exhausted:
		return syncguard.AcquireResult{}, &syncguard.Error{Op: op, Code: syncguard.CodeInternal, Key: key,
			Msg: fmt.Sprintf("a slot's fence counter reached its maximum (%d); nothing was committed", int64(rules.FenceMax))}
	}
	if !r.slot.Valid || !r.expires.Valid || !r.fence.Valid {
		res := syncguard.AcquireResult{OK: false, Reason: syncguard.ReasonLocked}
		if !r.free && r.firstExpiry.Valid {
			res.RetryIn = max(time.Duration(r.firstExpiry.Int64+rules.ToleranceMs+1-r.now)*time.Millisecond, 0)
		}
		if w != nil {
			w.contended(r.ahead)
		}
		return res, nil
	}
	fence, ferr := rules.FormatFence(r.fence.Int64)
	if ferr != nil {
		return syncguard.AcquireResult{}, &syncguard.Error{Op: op, Code: syncguard.CodeInternal, Key: key, Msg: "malformed fence returned by acquire"}
	}
	if r.fence.Int64 > rules.FenceWarn {
		s.logger.Warn("syncguard: semaphore slot fence above warning threshold",
			slog.String("keyHash", rules.HashKey(k.Norm)), slog.Int64("slot", r.slot.Int64), slog.String("fence", fence))
	}
	s.slots.Store(lockID, int(r.slot.Int64))
	if w != nil {
		s.grants.done(lockID)
	}
	var age time.Duration
	if r.state == "mine" && r.acquired.Valid {
		age = time.Duration(max(r.now-r.acquired.Int64, 0)) * time.Millisecond
	}
	return syncguard.AcquireResult{OK: true, LockID: lockID, Fence: syncguard.Fence(fence),
		ExpiresAt: time.UnixMilli(r.expires.Int64), HandedOver: age}, nil
}

// granted is the successful attempt of a waiter of s that a release
// through s handed a permit to (grants.go), without a statement: the
// permit's TTL started after the release was sent, so the lease counts
// from there (never believing in a longer permit than the server's).
// Not when the grant is for another TTL, or past half of it: the waiter
// attempts as usual.
func (s *Semaphore) granted(norm, lockID string, ttlMs int64, g grant) (syncguard.AcquireResult, bool) {
	age := time.Since(g.sent)
	fence, err := rules.FormatFence(g.fence)
	if err != nil || g.ttlMs != ttlMs || age > time.Duration(ttlMs)*time.Millisecond/2 {
		return syncguard.AcquireResult{}, false
	}
	if g.fence > rules.FenceWarn {
		s.logger.Warn("syncguard: semaphore slot fence above warning threshold",
			slog.String("keyHash", rules.HashKey(norm)), slog.Int("slot", g.slot), slog.String("fence", fence))
	}
	s.slots.Store(lockID, g.slot)
	return syncguard.AcquireResult{OK: true, LockID: lockID, Fence: syncguard.Fence(fence),
		ExpiresAt: time.UnixMilli(g.expiresMs), HandedOver: age}, true
}

// Release implements syncguard.Locker: it ends the permit lockID if it is
// live, and hands its slot to the first waiter in the same commit.
func (s *Semaphore) Release(ctx context.Context, lockID string) (syncguard.ReleaseResult, error) {
	r, _, err := s.release(ctx, lockID, "")
	return r, err
}

// release runs release.sql for lockID; wkey, when set, is the storage
// key of a waiter of lockID that leaves the queue. left: its queue row
// was there, live.
func (s *Semaphore) release(ctx context.Context, lockID, wkey string) (syncguard.ReleaseResult, bool, error) {
	const op = "release"
	if err := rules.ValidateLockID(lockID); err != nil {
		e := ruleErr(op, "", err)
		e.LockID = lockID
		return syncguard.ReleaseResult{}, false, e
	}
	if err := ctx.Err(); err != nil {
		return syncguard.ReleaseResult{}, false, s.wrap(ctx, op, "", err)
	}
	var wk any
	if wkey != "" {
		wk = wkey
		s.grants.done(lockID) // a permit handed to it is released below
	}
	var (
		released, left      bool
		seen                sql.NullInt64
		now                 int64
		woke, wokeCh        sql.NullString
		notified            sql.NullInt64
		granted             sql.NullString
		gSlot, gFence, gExp sql.NullInt64
		sent                time.Time
		err                 error
	)
	sent = time.Now()
	err = s.run(ctx, s.releaseFn, s.releaseSQL, []any{lockID, s.notifyDB == nil, wk},
		&released, &seen, &now, &woke, &wokeCh, &left, &notified, &granted, &gSlot, &gFence, &gExp)
	if err != nil {
		e := s.wrap(ctx, op, "", err)
		e.LockID = lockID
		return syncguard.ReleaseResult{}, false, e
	}
	s.slots.Delete(lockID)
	if granted.Valid && gSlot.Valid && gFence.Valid && gExp.Valid {
		s.grants.put(granted.String, grant{slot: int(gSlot.Int64), fence: gFence.Int64, expiresMs: gExp.Int64, ttlMs: gExp.Int64 - now, sent: sent})
	}
	if woke.Valid {
		s.waker.Wake(woke.String) // a waiter of this process: at once
		if s.notifyDB != nil && wokeCh.Valid {
			go s.notifyAfter(wokeCh.String, woke.String)
		}
	}
	if released {
		return syncguard.ReleaseResult{OK: true}, left, nil
	}
	return syncguard.ReleaseResult{Reason: failReason(seen, now)}, left, nil
}

var failReason = kit.FailReason

// releaseInBackground releases lockID, detached: an acquire whose outcome
// is unknown may have taken it.
func (s *Semaphore) releaseInBackground(lockID string) {
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), s.relTO)
		defer cancel()
		_, _, _ = s.release(ctx, lockID, "")
	}()
}

// Extend implements syncguard.Locker: the permit's expiry becomes server
// now + ttl if it is live; never revives an expired permit.
func (s *Semaphore) Extend(ctx context.Context, lockID string, ttl time.Duration) (syncguard.ExtendResult, error) {
	const op = "extend"
	if err := rules.ValidateLockID(lockID); err != nil {
		e := ruleErr(op, "", err)
		e.LockID = lockID
		return syncguard.ExtendResult{}, e
	}
	ttlMs := ttl.Milliseconds()
	if ttlMs < 1 {
		return syncguard.ExtendResult{}, invalidArg(op, fmt.Sprintf("ttl must be at least 1ms, got %v", ttl))
	}
	if err := ctx.Err(); err != nil {
		return syncguard.ExtendResult{}, s.wrap(ctx, op, "", err)
	}
	var (
		got, seen sql.NullInt64
		now       int64
	)
	if err := s.db.QueryRowContext(ctx, s.extendSQL, s.args(lockID, ttlMs)...).Scan(&got, &seen, &now); err != nil {
		e := s.wrap(ctx, op, "", err)
		e.LockID = lockID
		return syncguard.ExtendResult{}, e
	}
	if got.Valid {
		return syncguard.ExtendResult{OK: true, ExpiresAt: time.UnixMilli(got.Int64)}, nil
	}
	return syncguard.ExtendResult{Reason: failReason(seen, now)}, nil
}

func (s *Semaphore) wrap(ctx context.Context, op, key string, err error) *syncguard.Error {
	e := errwrap.Wrap(ctx, op, s.dialect, err)
	if e.Key == "" {
		e.Key = key
	}
	if e.SQLState == "42P01" || e.SQLState == "42501" {
		e.Msg += " (the semaphore's tables are missing or not granted: run semaphore.SetupSchema or apply semaphore.SchemaSQL, and grant " +
			strings.Join(tableList(s.table), ", ") + ")"
	}
	return e
}

func tableList(table string) []string {
	a, b, c := Tables(table)
	return []string{a, b, c}
}

// ruleErr reports a broken rule (internal/rules) as InvalidArgument.
func ruleErr(op, key string, err error) *syncguard.Error {
	var ae *rules.ArgError
	msg := err.Error()
	if errors.As(err, &ae) {
		msg = ae.Msg
	}
	e := invalidArg(op, msg)
	e.Key = key
	return e
}

// run runs a statement through its function (fn, its call) and scans its
// row into dest; once the function is missing or not granted (a schema of
// an earlier version, EXECUTE revoked), the statement itself (plain), from
// then on. Nothing ran when the call failed so.
func (s *Semaphore) run(ctx context.Context, fn, plain string, args []any, dest ...any) error {
	q := fn
	if s.noFuncs.Load() {
		q = plain
	}
	err := s.db.QueryRowContext(ctx, q, s.args(args...)...).Scan(dest...)
	if err != nil && q == fn {
		if e := errwrap.Wrap(ctx, "", s.dialect, err); stmtfunc.Missing(funcPrefix(s.table), e.SQLState, err.Error()) {
			s.noFuncs.Store(true)
			s.logger.Warn("syncguard: the semaphore's statement functions are missing or not granted: its statements are sent themselves "+
				"(planned at each execution); run semaphore.SetupSchema or apply semaphore.SchemaSQL", slog.String("error", err.Error()))
			err = s.db.QueryRowContext(ctx, plain, s.args(args...)...).Scan(dest...)
		}
	}
	return err
}

// args prepends the dialect's one-shot arguments, if any.
func (s *Semaphore) args(a ...any) []any {
	if len(s.oneShot) == 0 {
		return a
	}
	return append(append([]any{}, s.oneShot...), a...)
}
