package semaphore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/syncguard/syncguard-go/internal/kit"
	"github.com/syncguard/syncguard-go/internal/rules"
	"github.com/syncguard/syncguard-go/internal/waiting"
	"github.com/syncguard/syncguard-go/syncguard"
)

// MaxPermits is the largest number of permits a key may have.
const MaxPermits = 10_000

// ErrPermitsMismatch is the cause (errors.Is) of the InvalidArgument
// error of an acquire whose number of permits differs from the one the
// key was created with: nothing was taken.
var ErrPermitsMismatch = errors.New("semaphore: the key was created with another number of permits")

// staleRetries bounds how often one attempt runs its statement again
// after losing the key's compare-and-set to a concurrent take.
const staleRetries = 8

// Semaphore is a PostgreSQL counting semaphore: Permits permits per key,
// each a lease with its own slot and fence. It implements
// syncguard.LockBackend with a queue (Queue), so syncguard.Lock and
// WithLock (or Semaphore.Lock, which also returns the permit's slot) wait
// for a permit in FIFO order and give a *syncguard.Lease with TTL,
// AutoExtend, loss signal and release. Safe for concurrent use.
type Semaphore struct {
	k       *kit.Base
	permits int
	prefix  string // the notification channel prefix

	acquireSQL, releaseSQL, extendSQL, holdersSQL, listSQL string
	acquireFn, releaseFn                                   string // the calls of the statement functions (schema.go's funcs)

	ops    kit.Ops  // of its waiters
	slots  sync.Map // lockID -> slot, for Slot
	grants grants   // hand-offs to this Semaphore's waiters, for their next attempt
}

// New returns a Semaphore of permits permits per key on db, with the
// tables that cfg names (Tables; nil cfg: the defaults). Read from cfg:
// TableName, Dialect, Identity, NotifyDB, Logger, ReleaseTimeout and
// DisablePrepare, as syncguard.New reads them (behind a transaction-mode
// pooler set DisablePrepare for pgx, binary_parameters=yes in the DSN for
// lib/pq). A key's first acquire fixes its number of permits; an acquire
// through a Semaphore of another number fails with ErrPermitsMismatch.
// New does no I/O; bad input is an InvalidArgument *syncguard.Error.
func New(db *sql.DB, cfg *syncguard.Config, permits int) (*Semaphore, error) {
	const op = "semaphore.new"
	c, err := kit.Resolve(op, db, cfg)
	if err != nil {
		return nil, err
	}
	if permits < 1 || permits > MaxPermits {
		return nil, kit.InvalidArg(op, fmt.Sprintf("permits must be between 1 and %d, got %d", MaxPermits, permits))
	}
	if !c.DisablePrepare {
		c.OneShot = nil // prepared as the driver does by default
	}
	table := c.Table
	r := func(file string) string { return kit.StripComments(render(file, table)) }
	s := &Semaphore{k: kit.NewBase("semaphore", db, c), permits: permits, prefix: channelPrefix(table),
		acquireSQL: r("acquire.sql"), releaseSQL: r("release.sql"), extendSQL: r("extend.sql"), holdersSQL: r("holders.sql"), listSQL: r("list.sql")}
	s.ops = kit.Ops{Acquire: s.acquire, Release: s.Release, Leave: s.leave}
	af, rf := funcs(table)
	s.acquireFn, s.releaseFn = af.Call, rf.Call
	keys, slots, waiters := Tables(table)
	s.k.Funcs, s.k.Tables = funcPrefix(table), []string{keys, slots, waiters}
	return s, nil
}

// Capabilities implements syncguard.LockBackend: every permit carries a
// fence (its slot's), expiry is on the server's clock.
func (s *Semaphore) Capabilities() syncguard.Capabilities { return kit.Capabilities }

// Close closes the LISTEN connection that wakes waiting Lock calls, if
// one is open; not the *sql.DB. The Semaphore stays usable: waits poll.
func (s *Semaphore) Close() error { return s.k.Close() }

// NotificationStatus reports whether waiting on s is woken by
// notifications (true) or polls, and why, as
// syncguard.Backend.NotificationStatus does.
func (s *Semaphore) NotificationStatus(ctx context.Context) syncguard.NotificationStatus {
	return s.k.NotificationStatus(ctx)
}

// Slot returns the slot (1..Permits) of the permit lockID, as this
// Semaphore took or was handed it, and whether it knows it (a permit
// taken through another Semaphore value or process is read from its row
// by Lock). The slot with the key names the fence counter that the
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
	return s.acquire(ctx, key, ttl, s.k.Identity, nil)
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

func (s *Semaphore) acquire(ctx context.Context, key string, ttl time.Duration, ident string, w *kit.Waiter) (syncguard.AcquireResult, error) {
	const op = "acquire"
	k, ttlMs, err := s.k.StartKey(ctx, op, key, ttl)
	if err != nil {
		return syncguard.AcquireResult{}, err
	}
	lockID, window, notified := rules.GenerateLockID(), int64(0), false
	if w != nil {
		lockID = w.LockID
		if g, ok := s.grants.take(lockID); ok {
			if res, ok := s.granted(k.Norm, lockID, ttlMs, g); ok {
				s.grants.done(lockID)
				return res, nil
			}
		}
		s.grants.expect(lockID)
		window, notified = s.k.WindowMs(ctx), w.Join(s.k.Waker, w.Channel)
	}
	var idArg any
	if ident != "" {
		idArg = ident
	}
	var r acquireRow
	for i := 0; ; i++ {
		r = acquireRow{}
		err = s.k.Call(ctx, s.acquireFn, s.acquireSQL, []any{k.Storage, lockID, s.permits, k.Norm, ttlMs, window, notified, idArg},
			&r.state, &r.slot, &r.expires, &r.acquired, &r.fence, &r.stale, &r.exhausted, &r.permits, &r.firstExpiry, &r.free, &r.ahead, &r.now)
		if err != nil || !r.stale || i >= staleRetries || ctx.Err() != nil {
			break
		}
	}
	if err == nil && ctx.Err() != nil {
		err = ctx.Err()
	}
	if err != nil {
		s.k.Unsure(&s.ops, w, lockID) // it may have committed unanswered
		return syncguard.AcquireResult{}, s.k.WrapKey(ctx, op, key, "", err)
	}
	switch {
	case r.state == "mismatch":
		return syncguard.AcquireResult{}, &syncguard.Error{Op: op, Code: syncguard.ErrInvalidArgument, Key: key, Err: ErrPermitsMismatch,
			Msg: fmt.Sprintf("this key is a semaphore of %d permits, not %d (the first acquire of a key fixes its number of permits); nothing was taken", r.permits.Int64, s.permits)}
	case r.exhausted:
		return syncguard.AcquireResult{}, &syncguard.Error{Op: op, Code: syncguard.ErrInternal, Key: key,
			Msg: fmt.Sprintf("a slot's fence counter reached its maximum (%d); nothing was committed", int64(rules.FenceMax))}
	}
	if !r.slot.Valid || !r.expires.Valid || !r.fence.Valid {
		res := syncguard.AcquireResult{OK: false, Reason: syncguard.ReasonLocked}
		if !r.free && r.firstExpiry.Valid {
			res.RetryIn = kit.RetryIn(r.firstExpiry.Int64, r.now)
		}
		if w != nil {
			w.Contended(r.ahead)
		}
		return res, nil
	}
	fence, ferr := rules.FormatFence(r.fence.Int64)
	if ferr != nil {
		return syncguard.AcquireResult{}, &syncguard.Error{Op: op, Code: syncguard.ErrInternal, Key: key, Msg: "malformed fence returned by acquire"}
	}
	s.took(k.Norm, lockID, int(r.slot.Int64), r.fence.Int64, fence)
	if w != nil {
		s.grants.done(lockID)
	}
	var age time.Duration
	if r.state == "mine" {
		age = kit.Since(r.acquired, r.now)
	}
	return syncguard.AcquireResult{OK: true, LockID: lockID, Fence: syncguard.Fence(fence),
		ExpiresAt: time.UnixMilli(r.expires.Int64), HandedOver: age}, nil
}

// took records the slot of a permit taken or handed here, and warns of
// a fence near its maximum.
func (s *Semaphore) took(norm, lockID string, slot int, n int64, fence string) {
	if n > rules.FenceWarn {
		s.k.Logger.Warn("syncguard: semaphore slot fence above warning threshold",
			slog.String("keyHash", rules.HashKey(norm)), slog.Int("slot", slot), slog.String("fence", fence))
	}
	s.slots.Store(lockID, slot)
}

// granted is the successful attempt, without a statement, of a waiter of
// s that a release through s handed a permit to (grant): the lease counts
// from the release's send, after which the permit's TTL started. Not for
// another TTL, or past half of it: the waiter attempts as usual.
func (s *Semaphore) granted(norm, lockID string, ttlMs int64, g grant) (syncguard.AcquireResult, bool) {
	age := time.Since(g.sent)
	fence, err := rules.FormatFence(g.fence)
	if err != nil || g.ttlMs != ttlMs || age > time.Duration(ttlMs)*time.Millisecond/2 {
		return syncguard.AcquireResult{}, false
	}
	s.took(norm, lockID, g.slot, g.fence, fence)
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
	if _, err := s.k.StartID(ctx, op, lockID, 0, false); err != nil {
		return syncguard.ReleaseResult{}, false, err
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
	)
	sent := time.Now()
	err := s.k.Call(ctx, s.releaseFn, s.releaseSQL, []any{lockID, s.k.NotifyDB == nil, wk},
		&released, &seen, &now, &woke, &wokeCh, &left, &notified, &granted, &gSlot, &gFence, &gExp)
	if err != nil {
		return syncguard.ReleaseResult{}, false, s.k.WrapKey(ctx, op, "", lockID, err)
	}
	s.slots.Delete(lockID)
	if granted.Valid && gSlot.Valid && gFence.Valid && gExp.Valid {
		s.grants.put(granted.String, grant{slot: int(gSlot.Int64), fence: gFence.Int64, expiresMs: gExp.Int64, ttlMs: gExp.Int64 - now, sent: sent})
	}
	if woke.Valid {
		s.k.Waker.Wake(woke.String) // a waiter of this process: at once
		if s.k.NotifyDB != nil && wokeCh.Valid {
			s.k.NotifyLater(wokeCh.String, woke.String)
		}
	}
	if released {
		return syncguard.ReleaseResult{OK: true}, left, nil
	}
	return syncguard.ReleaseResult{Reason: kit.FailReason(seen, now)}, left, nil
}

// Extend implements syncguard.Locker: the permit's expiry becomes server
// now + ttl if it is live; never revives an expired permit.
func (s *Semaphore) Extend(ctx context.Context, lockID string, ttl time.Duration) (syncguard.ExtendResult, error) {
	const op = "extend"
	ttlMs, err := s.k.StartID(ctx, op, lockID, ttl, true)
	if err != nil {
		return syncguard.ExtendResult{}, err
	}
	var (
		got, seen sql.NullInt64
		now       int64
	)
	if err := s.k.Row(ctx, s.extendSQL, []any{lockID, ttlMs}, &got, &seen, &now); err != nil {
		return syncguard.ExtendResult{}, s.k.WrapKey(ctx, op, "", lockID, err)
	}
	if got.Valid {
		return syncguard.ExtendResult{OK: true, ExpiresAt: time.UnixMilli(got.Int64)}, nil
	}
	return syncguard.ExtendResult{Reason: kit.FailReason(seen, now)}, nil
}

// listenRank: a waiter within this many places of the head listens on
// its key's channel (as syncguard's Backend does).
const listenRank = 3

// Queue implements kit.Queuer: the waiter of one Lock or WithLock
// call for a permit of key, with one place in the key's queue (a release
// hands its slot to the first waiter in its own commit), listening within
// listenRank of the permits from the head (kit.Waiter.Near). With once,
// or for an invalid key, its attempts are plain ones.
func (s *Semaphore) Queue(key, identity string, once bool) kit.Wait {
	k, err := rules.DeriveKey(key)
	w := s.k.NewWaiter(key, k, waiting.Channel(s.prefix, k.Storage), identity, !once && err == nil, &s.ops)
	w.Near = int64(s.permits) + listenRank
	return w
}

// leave takes a waiter out of the queue and releases a slot handed to it
// meanwhile, which goes to the next waiter.
func (s *Semaphore) leave(ctx context.Context, q *kit.Waiter) (bool, bool, error) {
	r, left, err := s.release(ctx, q.LockID, q.First.Storage)
	return r.OK, left, err
}

// A grant is a hand-off that a release through this Semaphore made to a
// waiter of the same Semaphore: what release.sql returned of the slot it
// handed over, as committed (not a notification: those are hints only).
// The waiter's next attempt takes it without a statement, as the attempt
// that finds its lockId on a live slot would report it ('mine'). A grant
// to a waiter of another Semaphore or process is found by that waiter's
// attempt, which its notification causes.
type grant struct {
	slot      int
	fence     int64
	expiresMs int64     // server time
	ttlMs     int64     // the TTL it was handed with (the waiter's)
	sent      time.Time // the release statement's send: the permit's TTL started after it
}

// grants are the hand-offs to the waiters of one Semaphore, by lockId,
// kept only while the waiter waits: nothing outlives its waiter.
type grants struct {
	mu sync.Mutex
	m  map[string]*grant // a waiting waiter's lockId -> its grant, nil until one comes
}

// expect marks lockID as a waiter of this Semaphore.
func (g *grants) expect(lockID string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.m == nil {
		g.m = map[string]*grant{}
	}
	if _, ok := g.m[lockID]; !ok {
		g.m[lockID] = nil
	}
}

// put keeps x for lockID if it is a waiter of this Semaphore.
func (g *grants) put(lockID string, x grant) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, ok := g.m[lockID]; ok {
		g.m[lockID] = &x
	}
}

// take returns and forgets the grant to lockID, if one came.
func (g *grants) take(lockID string) (grant, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	x := g.m[lockID]
	if x == nil {
		return grant{}, false
	}
	g.m[lockID] = nil
	return *x, true
}

// done forgets lockID: it holds a permit, or left the queue.
func (g *grants) done(lockID string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.m, lockID)
}
