// Package syncguardtest provides an in-memory syncguard.LockBackend for the
// unit tests of code that uses syncguard: no database, no network, no
// sleeping through TTLs.
//
//	locks := syncguardtest.New()
//	err := syncguard.WithLock(ctx, locks, "invoice:42", handle, nil)
//
// The backend behaves like the PostgreSQL one as far as a caller can tell:
// it applies the same validation before doing anything (it asks a real
// syncguard Backend, so the errors are the same values, byte for byte),
// hands out real fences (15 digits, strictly increasing per key, never
// reset, failing with ErrInternal past 900000000000000), judges expiry
// with the spec's liveness rule on its own clock, and honours contexts like
// a driver: a context that ends while an operation is "on the wire" returns
// Aborted or NetworkTimeout, and the operation may still have taken effect.
// It passes the backend tier of package conformance (RunBackend), under
// -race too.
//
// What a test steers:
//
//   - the clock: Now is time.Now plus an offset that Advance moves forward
//     (inside a testing/synctest bubble time.Now is the bubble's fake clock),
//     and Expire ends one lock at once;
//   - the store: Delete removes a lock as an operator's DELETE would,
//     SetFence sets a key's fence counter;
//   - failures: Fail makes calls return an error of any syncguard.Code,
//     before or after they take effect (FailAfter), SetHook runs a function
//     at the start of every call, SetLatency delays every call;
//   - contention: Contend makes acquires of a key lose as if other
//     processes kept winning it;
//   - crashes and partitions: Crash(lockID) makes a holder gone (its lock
//     is neither extended nor released and expires at its TTL), Partition
//     cuts one simulated process (a WithIdentity view) off until Heal;
//   - transactions: WithTx returns a view shaped as syncguard's
//     Backend.WithTx, for code that takes locks inside its own
//     transaction (it does not simulate the transaction: see WithTx);
//   - logging: leases made on the backend log nothing (failed automatic
//     extensions under an injected outage would warn every TTL/10) unless
//     SetLogger gives them a logger;
//   - tracing: SetTracer sets a syncguard.Tracer, as Config.Tracer does
//     for a Backend (its operations, and Lock's waits and holdings on it).
//
// Waiting: the Backend has a queue (Queue), so syncguard.Lock and
// WithLock wait on it as on the PostgreSQL backend (on a WithTx view, as
// there, they poll with plain attempts). A waiter queues at its first contended attempt and keeps its place; a
// release hands the key to the first live waiter in the same step and
// wakes it, and so does the first step that finds a holder's lock no
// longer live (a crashed holder's key goes on at its expiry plus the 1 s
// tolerance, an Advance past it hands it on at once). A waiter is live
// while it attempts (Lock renews every 10 s): one not seen for 15 s (the
// queue window, on time.Now) is skipped until it attempts again. A plain
// Acquire never queues, and a free key with live waiters goes to the
// first of them. A wrapper of the caller's own that forwards Queue keeps
// this; one that does not makes Lock poll (queue.go, docs/testing.md).
//
// Inspection: Calls counts the calls that reached the store, Len the
// stored lock records, SetHook sees each call (with the WithTx view's
// transaction, if any).
package syncguardtest

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/syncguard/syncguard-go/internal/rules"
	"github.com/syncguard/syncguard-go/syncguard"
)

// Op names a LockBackend operation, as in syncguard.Error.Op.
type Op string

// The operations. LookupKey, LookupID and their debug variants are all
// OpLookup.
const (
	OpAcquire  Op = "acquire"
	OpRelease  Op = "release"
	OpExtend   Op = "extend"
	OpIsLocked Op = "isLocked"
	OpLookup   Op = "lookup"
)

// Call describes one operation, for SetHook.
type Call struct {
	Op     Op
	Key    string       // the key as passed, for key operations
	LockID string       // the lockId, for lockId operations
	Tx     syncguard.Tx // the transaction of the WithTx view it was made on; nil on the pool
}

// Backend is an in-memory syncguard.LockBackend. Make one with New; it is
// safe for concurrent use. Several goroutines (or "processes") sharing one
// Backend see the same locks, as several pools on one database do.
type Backend struct {
	*store
	tx       syncguard.Tx // non-nil for a WithTx view
	identity string       // WithIdentity
	proc     *process     // the simulated process (Partition); WithTx views share their parent's
}

// store is the state every view of a Backend shares.
type store struct {
	check *validator

	mu      sync.Mutex
	offset  time.Duration
	latency time.Duration
	hook    func(ctx context.Context, c Call) error
	fails   map[Op]*failure
	contend map[string]int     // by normalized key
	locks   map[string]*record // by normalized key
	byID    map[string]string  // lockId -> normalized key
	fences  map[string]int64   // by normalized key
	calls   map[Op]int
	logger  *slog.Logger     // LeaseLogger; nil: discard
	tracer  syncguard.Tracer // SetTracer

	queues map[string][]*waiter // by normalized key, in queue order (queue.go)
	seq    uint64               // the place of the last waiter queued
}

type record struct {
	key, lockID         string // normalized key
	expiresMs, acquired int64
	fence               syncguard.Fence
	identity            string
	crashed             bool // Crash: its holder is gone
}

type failure struct {
	code  syncguard.Code
	n     int // remaining; < 0: every call
	after bool
}

var _ syncguard.LockBackend = (*Backend)(nil)

// New returns an empty Backend whose clock is time.Now.
func New() *Backend {
	return &Backend{store: &store{
		check:   newValidator(),
		fails:   map[Op]*failure{},
		contend: map[string]int{},
		locks:   map[string]*record{},
		byID:    map[string]string{},
		fences:  map[string]int64{},
		calls:   map[Op]int{},
		queues:  map[string][]*waiter{},
	}, proc: &process{}}
}

// WithIdentity returns a view of b whose acquires store identity as the
// holder's, as syncguard's Config.Identity does (LockOptions.Identity
// overrides it for one lock); the lookups show it in LockInfo.Identity.
// The view shares b's locks, fences, clock, failures and counts: give each
// simulated process its own view. The view is a process of its own for
// Partition.
func (b *Backend) WithIdentity(identity string) *Backend {
	return &Backend{store: b.store, tx: b.tx, identity: identity, proc: &process{}}
}

// WithTx returns a view of b for code that takes locks inside its own
// transaction, shaped as syncguard's Backend.WithTx: code under test calls
// locks.WithTx(tx).Acquire(...) on either (docs/testing.md shows an
// interface both satisfy). The view shares b's locks, fences, clock,
// failures and counts, and tx is never used: the test's transaction can be
// a fake (any syncguard.Tx, nil included). Calls made on the view carry tx
// in their Call, for SetHook.
//
// The view behaves like the pool: what it does takes effect at once and
// stays. It does not simulate the transaction: a rollback does not undo
// the view's acquire (a test simulates it with Delete(lockID)), a lock
// taken through the view is visible to IsLocked and the lookups before a
// commit (the real one is not, although its acquirers are told "locked"),
// and operations after the transaction ended still work (the real ones
// fail with sql.ErrTxDone). A nil tx gives b's pool behaviour, as in
// syncguard.
func (b *Backend) WithTx(tx syncguard.Tx) *Backend {
	return &Backend{store: b.store, tx: tx, identity: b.identity, proc: b.proc}
}

// SetLogger sets the logger of the leases made on b (and its WithTx views)
// when their LockOptions.Logger is nil: warnings of failed automatic
// extensions and failed releases. nil, the default, discards them.
func (b *Backend) SetLogger(l *slog.Logger) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.logger = l
}

// LeaseLogger is what syncguard.Lock and WithLock consult for the default
// LockOptions.Logger of the leases made on b: the logger SetLogger set, or
// one that discards everything. A test that injects failures (Fail on
// OpExtend, say) then stays quiet; the warnings a real Backend would log
// go to slog.Default.
func (b *Backend) LeaseLogger() *slog.Logger {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.logger == nil {
		return discard
	}
	return b.logger
}

var discard = slog.New(slog.DiscardHandler)

// --- the clock

// Now returns the backend's clock: time.Now plus everything Advance added.
// Expiry is judged on it, and ExpiresAt values are on it.
func (b *Backend) Now() time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.now()
}

func (b *Backend) now() time.Time { return time.Now().Add(b.offset) }

func (b *Backend) nowMs() int64 { return b.now().UnixMilli() }

// Advance moves the backend's clock forward by d (a negative d is
// ignored: the clock that decides expiry never goes back). A lock is free
// once the clock passes its ExpiresAt plus the spec's 1000 ms tolerance.
// Leases and WithLock keep using the real time.Now for their own schedule:
// advancing past a held lock's expiry is what a long pause of its holder
// looks like.
func (b *Backend) Advance(d time.Duration) {
	if d <= 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.offset += d
	b.handOffAll()
}

// Expire ends the lock of lockID now: its expiry moves an hour into the
// past, so it is free for acquirers, and Release and Extend of it report
// syncguard.ReasonExpired. It reports whether lockID had a record.
func (b *Backend) Expire(lockID string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	r := b.record(lockID)
	if r == nil {
		return false
	}
	r.expiresMs -= time.Hour.Milliseconds()
	b.handOff(r.key, b.nowMs(), nil)
	return true
}

// --- the store

// Delete removes the lock record of lockID, as an operator's
// DELETE FROM syncguard_locks WHERE lock_id = ... would. Fence counters
// stay. It reports whether there was a record.
func (b *Backend) Delete(lockID string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	r := b.record(lockID)
	if r == nil {
		return false
	}
	delete(b.locks, r.key)
	delete(b.byID, lockID)
	b.handOff(r.key, b.nowMs(), nil)
	return true
}

// SetFence sets the fence counter of key to n, so that its next acquire
// gets fence n+1. It fails with the validation error Acquire would give for
// an invalid key, and with InvalidArgument for a negative n.
func (b *Backend) SetFence(key string, n int64) error {
	norm, err := b.check.key(context.Background(), OpAcquire, key)
	if err != nil {
		return err
	}
	if n < 0 {
		return &syncguard.Error{Op: "setFence", Code: syncguard.ErrInvalidArgument, Key: key, Msg: "fence counter must not be negative"}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.fences[norm] = n
	return nil
}

// Len returns the number of stored lock records, live or expired. Release
// deletes a record; an expired one stays until its key is acquired again.
func (b *Backend) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.locks)
}

// Calls returns how many calls of op reached the store: valid input, a
// live context, no injected failure before it.
func (b *Backend) Calls(op Op) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.calls[op]
}

// --- the operations

// acquire is one attempt with holder identity ident, as waiter w (nil: a
// plain one).
func (b *Backend) acquire(ctx context.Context, key string, ttl time.Duration, ident string, w *waiter) (syncguard.AcquireResult, error) {
	norm, err := b.check.acquire(ctx, key, ttl)
	if err != nil {
		return syncguard.AcquireResult{}, err
	}
	var res syncguard.AcquireResult
	err = b.do(ctx, Call{Op: OpAcquire, Key: key, Tx: b.tx}, func(now int64) error {
		var err error
		res, err = b.attempt(norm, key, ttl.Milliseconds(), ident, w, now)
		return err
	})
	if err != nil {
		return syncguard.AcquireResult{}, err
	}
	return res, nil
}

// take writes a new lock of norm for ttlMs, with the key's next fence.
// Caller holds mu.
func (b *Backend) take(norm, key string, ttlMs int64, ident string, now int64) (*record, error) {
	next := b.fences[norm] + 1
	if next > rules.FenceMax {
		return nil, &syncguard.Error{Op: string(OpAcquire), Code: syncguard.ErrInternal, Key: key,
			Msg: fmt.Sprintf("fence counter for this key reached its maximum (%d); nothing was committed", int64(rules.FenceMax))}
	}
	text, err := rules.FormatFence(next)
	if err != nil {
		return nil, err
	}
	b.fences[norm] = next
	if old := b.locks[norm]; old != nil {
		delete(b.byID, old.lockID)
	}
	r := &record{key: norm, lockID: rules.GenerateLockID(), expiresMs: now + ttlMs, acquired: now, fence: syncguard.Fence(text), identity: ident}
	b.locks[norm] = r
	b.byID[r.lockID] = norm
	return r, nil
}

func acquired(r *record) syncguard.AcquireResult {
	return syncguard.AcquireResult{OK: true, LockID: r.lockID, Fence: r.fence, ExpiresAt: time.UnixMilli(r.expiresMs)}
}

func (b *Backend) release(ctx context.Context, lockID string) (syncguard.ReleaseResult, error) {
	if err := b.check.release(ctx, lockID); err != nil {
		return syncguard.ReleaseResult{}, err
	}
	var res syncguard.ReleaseResult
	err := b.do(ctx, Call{Op: OpRelease, LockID: lockID, Tx: b.tx}, func(now int64) error {
		r := b.record(lockID)
		if r != nil && r.crashed {
			return crashedErr(OpRelease, lockID)
		}
		if reason := failReason(r, now); reason != "" {
			res.Reason = reason
			return nil
		}
		delete(b.locks, r.key)
		delete(b.byID, lockID)
		b.handOff(r.key, now, nil)
		res.OK = true
		return nil
	})
	if err != nil {
		return syncguard.ReleaseResult{}, err
	}
	return res, nil
}

func (b *Backend) extend(ctx context.Context, lockID string, ttl time.Duration) (syncguard.ExtendResult, error) {
	if err := b.check.extend(ctx, lockID, ttl); err != nil {
		return syncguard.ExtendResult{}, err
	}
	ttlMs := ttl.Milliseconds()
	var res syncguard.ExtendResult
	err := b.do(ctx, Call{Op: OpExtend, LockID: lockID, Tx: b.tx}, func(now int64) error {
		r := b.record(lockID)
		if r != nil && r.crashed {
			return crashedErr(OpExtend, lockID)
		}
		if reason := failReason(r, now); reason != "" {
			res.Reason = reason
			return nil
		}
		r.expiresMs = now + ttlMs
		res = syncguard.ExtendResult{OK: true, ExpiresAt: time.UnixMilli(r.expiresMs)}
		return nil
	})
	if err != nil {
		return syncguard.ExtendResult{}, err
	}
	return res, nil
}

func (b *Backend) isLocked(ctx context.Context, key string) (bool, error) {
	norm, err := b.check.isLocked(ctx, key)
	if err != nil {
		return false, err
	}
	var locked bool
	err = b.do(ctx, Call{Op: OpIsLocked, Key: key, Tx: b.tx}, func(now int64) error {
		locked = b.live(b.locks[norm], now) != nil
		return nil
	})
	return locked && err == nil, err
}

func (b *Backend) lookupKey(ctx context.Context, key string) (*syncguard.LockInfo, error) {
	norm, err := b.check.lookupKey(ctx, key)
	if err != nil {
		return nil, err
	}
	var d *syncguard.LockInfo
	err = b.do(ctx, Call{Op: OpLookup, Key: key, Tx: b.tx}, func(now int64) error {
		d = info(b.live(b.locks[norm], now))
		return nil
	})
	if err != nil {
		return nil, err
	}
	return d, nil
}

func (b *Backend) lookupID(ctx context.Context, lockID string) (*syncguard.LockInfo, error) {
	if err := b.check.lookupID(ctx, lockID); err != nil {
		return nil, err
	}
	var d *syncguard.LockInfo
	err := b.do(ctx, Call{Op: OpLookup, LockID: lockID, Tx: b.tx}, func(now int64) error {
		d = info(b.live(b.record(lockID), now))
		return nil
	})
	if err != nil {
		return nil, err
	}
	return d, nil
}

// Capabilities implements syncguard.LockBackend: fencing, and expiry
// decided by the backend's own clock (Now).
func (b *Backend) Capabilities() syncguard.Capabilities {
	return syncguard.Capabilities{Backend: "syncguardtest", SupportsFencing: true, TimeAuthority: "server"}
}

// --- internals

// do runs exec against the store as one round trip: the hook, a
// partition and injected failures first, the latency there and back, the
// context's end on the way back reported although exec took effect.
func (b *Backend) do(ctx context.Context, c Call, exec func(nowMs int64) error) error {
	b.mu.Lock()
	hook, latency := b.hook, b.latency
	b.mu.Unlock()
	if hook != nil {
		if err := hook(ctx, c); err != nil {
			return err
		}
	}
	if err := b.wait(ctx, c, latency); err != nil {
		return err
	}
	b.mu.Lock()
	if b.proc.partitioned {
		b.mu.Unlock()
		return partitionErr(c)
	}
	var injected *syncguard.Error
	if f := b.fails[c.Op]; f != nil {
		injected = Err(c.Op, f.code)
		injected.Key, injected.LockID = c.Key, c.LockID
		if f.n > 0 {
			if f.n--; f.n == 0 {
				delete(b.fails, c.Op)
			}
		}
		if !f.after {
			b.mu.Unlock()
			return injected
		}
	}
	b.calls[c.Op]++
	err := exec(b.nowMs())
	b.mu.Unlock()
	if err != nil {
		return err
	}
	if injected != nil {
		return injected
	}
	return b.wait(ctx, c, latency)
}
