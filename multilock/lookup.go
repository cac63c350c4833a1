package multilock

import (
	"context"
	"database/sql"
	"slices"
	"strings"
	"time"

	"github.com/syncguard/syncguard-go/internal/pooler"
	"github.com/syncguard/syncguard-go/syncguard"
)

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
}

// Info is h as a syncguard.LockInfo: KeyHash of the set's encoding, the
// lockId's hash, and the largest fence.
func (h *Holding) info(lockID string) *syncguard.LockInfo {
	var top syncguard.Fence
	for _, f := range h.Fences {
		top = max(top, f.Fence)
	}
	return &syncguard.LockInfo{KeyHash: syncguard.HashKey(h.Set), LockIDHash: syncguard.HashKey(lockID),
		ExpiresAt: h.ExpiresAt, AcquiredAt: h.AcquiredAt, Fence: top, Identity: h.Identity}
}

// lookup reads the rows of lockID, or of the keys of set and of the
// holdings that hold any of them: the live holdings by lockId (every key
// live), and whether any key of set is held by a live row.
func (l *Locker) lookup(ctx context.Context, op, lockID, set string, all bool) (map[string]*Holding, bool, error) {
	keysJSON := "[]"
	if set != "" {
		ks, e := parse(op, set)
		if e != nil {
			return nil, false, e
		}
		keysJSON = setJSON(ks)
	}
	if e := ctxErr(ctx, op, l); e != nil {
		return nil, false, e
	}
	rows, err := pooler.Unprepared(l.db, l.oneShot).QueryContext(ctx, l.sql.lookup, lockID, keysJSON, all)
	if err != nil {
		return nil, false, l.wrap(ctx, op, err)
	}
	defer rows.Close()
	type agg struct {
		h    *Holding
		keys []string
		n    int
		live bool
	}
	by := map[string]*agg{}
	anyLive := false
	want := map[string]bool{}
	if set != "" {
		ks, _ := parse(op, set)
		for _, k := range ks {
			want[k.Storage] = true
		}
	}
	for rows.Next() {
		var (
			key, id, user, fence string
			expires, acquired    int64
			n                    int
			ident                sql.NullString
			live                 bool
			now                  int64
		)
		if err := rows.Scan(&key, &id, &user, &fence, &expires, &acquired, &n, &ident, &live, &now); err != nil {
			return nil, false, l.wrap(ctx, op, err)
		}
		a := by[id]
		if a == nil {
			a = &agg{h: &Holding{ExpiresAt: time.UnixMilli(expires), AcquiredAt: time.UnixMilli(acquired), Identity: ident.String}, n: n, live: true}
			by[id] = a
		}
		a.h.Fences = append(a.h.Fences, KeyFence{Key: user, Fence: syncguard.Fence(fence)})
		a.keys = append(a.keys, user)
		a.live = a.live && live
		if live && want[key] {
			anyLive = true
		}
	}
	if err := rows.Err(); err != nil {
		return nil, false, l.wrap(ctx, op, err)
	}
	out := map[string]*Holding{}
	for id, a := range by {
		if a.live && len(a.keys) == a.n {
			a.h.Set, a.h.LockIDHash = Keys(a.keys...), syncguard.HashKey(id)
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
	for id, h := range hs {
		have := map[string]bool{}
		for _, f := range h.Fences {
			have[f.Key] = true
		}
		all := true
		for _, k := range want {
			all = all && have[k]
		}
		if all {
			return h.info(id), nil
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
	return h.info(lockID), nil
}

// Holding returns the live holding lockID (every key still held), with
// its keys and their fences, or nil. For debugging: it shows the keys.
func (l *Locker) Holding(ctx context.Context, lockID string) (*Holding, error) {
	if e := checkLockID("lookup", lockID); e != nil {
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
	if e := checkLockID("fences", lockID); e != nil {
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
	out := make([]*Holding, 0, len(hs))
	for _, h := range hs {
		out = append(out, h)
	}
	slices.SortFunc(out, func(a, b *Holding) int { return strings.Compare(a.Set+a.LockIDHash, b.Set+b.LockIDHash) })
	return out, nil
}
