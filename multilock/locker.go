package multilock

import (
	"context"
	"database/sql"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/syncguard/syncguard-go/internal/kit"
	"github.com/syncguard/syncguard-go/syncguard"
)

var (
	_ syncguard.LockBackend = (*Locker)(nil)
	_ kit.Queuer            = (*Locker)(nil)
	_ SetLocker             = (*Locker)(nil)
)

// Locker takes sets of keys on PostgreSQL: all keys of a set or none, in
// one statement, with a fence per key. Its key argument is an encoded set
// (Keys), so syncguard.Lock and WithLock work on it unchanged (one lockId
// and one Lease for the set: Extend and Close act on every key at once),
// and it has a queue (Queue): waiters keep one place in one queue
// across all their keys. Lock (this package) wraps syncguard.Lock and
// returns the per-key fences. Safe for concurrent use.
type Locker struct {
	k      *kit.Base
	ops    kit.Ops // of its waiters
	tables Tables
	sql    struct {
		statements
		placeholder, lookup string
	}

	mu     sync.Mutex
	recent map[string][]KeyFence // the fences of holdings taken here, by lockId, until released
}

// maxRecent bounds Locker's memory of the fences of its holdings.
const maxRecent = 4096

// New returns a Locker on db with cfg (nil: the defaults): TableName
// (TablesOf), Dialect, Identity, Logger, NotifyDB and ReleaseTimeout, as
// syncguard.New reads them. New does no I/O: call SetupSchema once (or
// apply SchemaSQL) before use. Its statements go out unprepared, in one
// round trip (also behind a pooler in transaction mode).
func New(db *sql.DB, cfg *syncguard.Config) (*Locker, error) {
	const op = "multilock.new"
	c, err := kit.Resolve(op, db, cfg)
	if err != nil {
		return nil, err
	}
	t, err := tablesOf(op, cfg)
	if err != nil {
		return nil, err
	}
	l := &Locker{k: kit.NewBase("multilock", db, c), tables: t, recent: map[string][]KeyFence{}}
	l.k.Inline, l.k.Funcs = true, t.Locks
	l.ops = kit.Ops{Acquire: l.acquire, Release: l.Release, Leave: l.leave}
	l.k.Tables = []string{t.Locks, t.Fences, t.Waiters}
	l.sql.statements = t.statements()
	l.sql.placeholder = kit.StripComments(t.render("placeholder.sql"))
	l.sql.lookup = kit.StripComments(t.render("lookup.sql"))
	return l, nil
}

// Tables reports the Locker's tables.
func (l *Locker) Tables() Tables { return l.tables }

// Capabilities implements syncguard.LockBackend: "postgres", fencing (a
// fence per key; AcquireResult.Fence is the largest), server time.
func (l *Locker) Capabilities() syncguard.Capabilities { return kit.Capabilities }

// Close closes the LISTEN connection that wakes waiting Lock calls, if
// one is open; not the *sql.DB. The Locker stays usable.
func (l *Locker) Close() error { return l.k.Close() }

// NotificationStatus reports whether waiting on l is woken the moment a
// release hands a waiter its set, or finds out at its next attempt
// (polling), as syncguard.Backend.NotificationStatus does.
func (l *Locker) NotificationStatus(ctx context.Context) syncguard.NotificationStatus {
	return l.k.NotificationStatus(ctx)
}

// maxReruns bounds the statements run again in one operation: after a
// stale snapshot (another statement changed one of the keys between the
// snapshot and the lock) or a serialization failure (40001, 40P01, which
// the one lock order should make impossible).
const maxReruns = 64

// rerun reports whether err is a serialization failure run again.
func (l *Locker) rerun(err error) bool {
	st := l.k.Dialect.Inspect(err).SQLState
	return st == "40001" || st == "40P01" || st == "55P03" // 55P03: a statement function's NOWAIT (funcs.go)
}

// remember records the fences of a holding taken or handed here.
func (l *Locker) remember(lockID string, f []KeyFence) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.recent) >= maxRecent {
		for k := range l.recent {
			delete(l.recent, k)
			break
		}
	}
	l.recent[lockID] = f
}

func (l *Locker) forget(lockID string) {
	l.mu.Lock()
	delete(l.recent, lockID)
	l.mu.Unlock()
}

// KeyFence is one key of a held set and its fence: strictly greater than
// every fence handed out before for that key by multilock (each key has
// its own counter, independent of the mutex of the same name).
type KeyFence struct {
	Key   string          // the key, in NFC form
	Fence syncguard.Fence // its fence in this holding
}

// Holding describes a live holding of a set, as Locker.Holding returns
// it. Like every lookup it describes an instant that has passed when it
// arrives: never use it to decide a write (fences protect the resource).
type Holding struct {
	Set        string     // the set, encoded (Keys)
	Fences     []KeyFence // each key and its fence, in canonical order
	ExpiresAt  time.Time  // server-computed expiry of every key
	AcquiredAt time.Time  // server time of the acquire or hand-off
	Identity   string     // the holder's identity, "" when none
	LockIDHash string     // syncguard.HashKey of the holding's lockId
	lockID     string
}

// info is h as a syncguard.LockInfo: KeyHash of the set's encoding, and
// the largest fence.
func (h *Holding) info() *syncguard.LockInfo {
	var top syncguard.Fence
	for _, f := range h.Fences {
		top = max(top, f.Fence)
	}
	return &syncguard.LockInfo{KeyHash: syncguard.HashKey(h.Set), LockIDHash: h.LockIDHash,
		ExpiresAt: h.ExpiresAt, AcquiredAt: h.AcquiredAt, Fence: top, Identity: h.Identity}
}

// lookup reads the rows of lockID, or of the keys of set and of the
// holdings that hold any of them: the live holdings by lockId (every key
// live), and whether any key of set is held by a live row.
func (l *Locker) lookup(ctx context.Context, op, lockID, set string, all bool) (map[string]*Holding, bool, error) {
	keysJSON, want := "[]", map[string]bool{}
	if set != "" {
		ks, e := parse(op, set)
		if e != nil {
			return nil, false, e
		}
		keysJSON = setJSON(ks)
		for _, k := range ks {
			want[k.Storage] = true
		}
	}
	type agg struct {
		h    *Holding
		keys []string
		n    int
		live bool
	}
	by := map[string]*agg{}
	anyLive := false
	err := l.k.Each(ctx, op, l.sql.lookup, []any{lockID, keysJSON, all}, func(scan func(...any) error) error {
		var (
			key, id, user, fence string
			expires, acquired    int64
			n                    int
			ident                sql.NullString
			live                 bool
			now                  int64
		)
		if err := scan(&key, &id, &user, &fence, &expires, &acquired, &n, &ident, &live, &now); err != nil {
			return err
		}
		a := by[id]
		if a == nil {
			a = &agg{h: &Holding{ExpiresAt: time.UnixMilli(expires), AcquiredAt: time.UnixMilli(acquired), Identity: ident.String}, n: n, live: true}
			by[id] = a
		}
		a.h.Fences = append(a.h.Fences, KeyFence{Key: user, Fence: syncguard.Fence(fence)})
		a.keys = append(a.keys, user)
		a.live = a.live && live
		anyLive = anyLive || live && want[key]
		return nil
	})
	if err != nil {
		return nil, false, err
	}
	out := map[string]*Holding{}
	for id, a := range by {
		if a.live && len(a.keys) == a.n {
			a.h.Set, a.h.LockIDHash, a.h.lockID = Keys(a.keys...), syncguard.HashKey(id), id
			out[id] = a.h
		}
	}
	return out, anyLive, nil
}

// IsLocked implements syncguard.LockBackend: whether any key of set is
// held by a live holding (of any set).
func (l *Locker) IsLocked(ctx context.Context, set string) (bool, error) {
	_, any, err := l.lookup(ctx, "isLocked", "", set, false)
	return any, err
}

// LookupKey implements syncguard.LockBackend: the live holding that holds
// every key of set (a holding of exactly that set, or of a larger one),
// or nil.
func (l *Locker) LookupKey(ctx context.Context, set string) (*syncguard.LockInfo, error) {
	hs, _, err := l.lookup(ctx, "lookup", "", set, false)
	if err != nil {
		return nil, err
	}
	want, _ := ParseKeys(set)
	for _, h := range hs {
		if !slices.ContainsFunc(want, func(k string) bool {
			return !slices.ContainsFunc(h.Fences, func(f KeyFence) bool { return f.Key == k })
		}) {
			return h.info(), nil
		}
	}
	return nil, nil
}

// LookupID implements syncguard.LockBackend: the live holding lockID, or
// nil.
func (l *Locker) LookupID(ctx context.Context, lockID string) (*syncguard.LockInfo, error) {
	h, err := l.Holding(ctx, lockID)
	if h == nil || err != nil {
		return nil, err
	}
	return h.info(), nil
}

// Holding returns the live holding lockID (every key still held), with
// its keys and their fences, or nil. For debugging: it shows the keys.
func (l *Locker) Holding(ctx context.Context, lockID string) (*Holding, error) {
	if e := kit.CheckLockID("lookup", lockID); e != nil {
		return nil, e
	}
	hs, _, err := l.lookup(ctx, "lookup", lockID, "", false)
	if err != nil {
		return nil, err
	}
	return hs[lockID], nil
}

// Fences returns each key of the holding lockID with its fence, in
// canonical order: from memory for a holding this Locker took or was
// handed (no I/O), else from the live holding; nil when there is none.
func (l *Locker) Fences(ctx context.Context, lockID string) ([]KeyFence, error) {
	if e := kit.CheckLockID("fences", lockID); e != nil {
		return nil, e
	}
	l.mu.Lock()
	f, ok := l.recent[lockID]
	l.mu.Unlock()
	if ok {
		return append([]KeyFence(nil), f...), nil
	}
	h, err := l.Holding(ctx, lockID)
	if h == nil || err != nil {
		return nil, err
	}
	return h.Fences, nil
}

// List returns every live holding, ordered by set, for diagnostics (the
// CLI's status): keys, fences, expiry, identity and the lockId's hash.
// It shows the keys, which may hold personal data: do not log it in
// production.
func (l *Locker) List(ctx context.Context) ([]*Holding, error) {
	hs, _, err := l.lookup(ctx, "list", "", "", true)
	if err != nil {
		return nil, err
	}
	return sorted(hs), nil
}

// sorted are the holdings of hs by set (then lockId's hash).
func sorted(hs map[string]*Holding) []*Holding {
	out := make([]*Holding, 0, len(hs))
	for _, h := range hs {
		out = append(out, h)
	}
	slices.SortFunc(out, func(a, b *Holding) int { return strings.Compare(a.Set+a.LockIDHash, b.Set+b.LockIDHash) })
	return out
}

// Revoke forces out every live holding whose set has key (an operator's
// last resort: the CLI's revoke), as its holder's release would
// (kit.Revoke), and returns those it ended, by set; a holder learns it at
// its next extend (syncguard.ErrLockLost).
func (l *Locker) Revoke(ctx context.Context, key string) ([]*Holding, error) {
	hs, _, err := l.lookup(ctx, "revoke", "", Keys(key), false)
	if err != nil {
		return nil, err
	}
	return kit.Revoke(ctx, sorted(hs), func(ctx context.Context, h *Holding) (syncguard.ReleaseResult, error) {
		return l.Release(ctx, h.lockID)
	})
}
