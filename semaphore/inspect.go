package semaphore

import (
	"context"
	"database/sql"
	"time"

	"github.com/syncguard/syncguard-go/internal/rules"
	"github.com/syncguard/syncguard-go/syncguard"
)

// Holder is one live permit, as Holders and LookupPermit read it.
type Holder struct {
	Slot       int             // 1..permits: the fence counter its fence belongs to
	Fence      syncguard.Fence // the slot's fence of this permit
	AcquiredAt time.Time       // server time it was taken or handed over
	ExpiresAt  time.Time       // server-computed expiry
	Identity   string          // the holder's identity, "" when none was set
	LockIDHash string          // syncguard.HashKey of its lockId
	lockID     string
	keyHash    string
}

// KeyStatus is a semaphore key as Holders reads it: a diagnostic, stale
// when it arrives (fences protect the resource, not lookups).
type KeyStatus struct {
	Permits int       // the key's number of permits; 0 when it was never acquired
	Holders []Holder  // live permits, by slot
	Now     time.Time // the server's clock when read
}

// Free is the number of permits not held.
func (k KeyStatus) Free() int { return k.Permits - len(k.Holders) }

// Holders reads the key's number of permits and its live permits, in one
// statement.
func (s *Semaphore) Holders(ctx context.Context, key string) (KeyStatus, error) {
	k, err := rules.DeriveKey(key)
	if err != nil {
		return KeyStatus{}, ruleErr("lookup", key, err)
	}
	return s.read(ctx, k.Storage, nil, key)
}

// LookupPermit returns the live permit lockID, nil when it is not held.
func (s *Semaphore) LookupPermit(ctx context.Context, lockID string) (*Holder, error) {
	if err := rules.ValidateLockID(lockID); err != nil {
		e := ruleErr("lookup", "", err)
		e.LockID = lockID
		return nil, e
	}
	st, err := s.read(ctx, nil, lockID, "")
	if err != nil {
		return nil, err
	}
	for _, h := range st.Holders {
		if h.lockID == lockID {
			return &h, nil
		}
	}
	return nil, nil
}

func (s *Semaphore) read(ctx context.Context, storage, lockID any, key string) (KeyStatus, error) {
	const op = "lookup"
	if err := ctx.Err(); err != nil {
		return KeyStatus{}, s.wrap(ctx, op, key, err)
	}
	rows, err := s.db.QueryContext(ctx, s.holdersSQL, s.args(storage, lockID)...)
	if err != nil {
		return KeyStatus{}, s.wrap(ctx, op, key, err)
	}
	defer rows.Close()
	var st KeyStatus
	for rows.Next() {
		var (
			now                            int64
			permits, slot, exp, acq, fence sql.NullInt64
			id, ident, userKey             sql.NullString
		)
		if err := rows.Scan(&now, &permits, &slot, &id, &exp, &acq, &fence, &ident, &userKey); err != nil {
			return KeyStatus{}, s.wrap(ctx, op, key, err)
		}
		st.Now, st.Permits = time.UnixMilli(now), int(permits.Int64)
		if !slot.Valid || !id.Valid || !rules.IsLive(exp.Int64, now) {
			continue
		}
		f, _ := rules.FormatFence(fence.Int64)
		st.Holders = append(st.Holders, Holder{Slot: int(slot.Int64), Fence: syncguard.Fence(f), AcquiredAt: time.UnixMilli(acq.Int64),
			ExpiresAt: time.UnixMilli(exp.Int64), Identity: ident.String, LockIDHash: rules.HashKey(id.String), lockID: id.String, keyHash: rules.HashKey(userKey.String)})
	}
	if err := rows.Err(); err != nil {
		return KeyStatus{}, s.wrap(ctx, op, key, err)
	}
	return st, nil
}

// IsLocked implements syncguard.LockBackend: whether every permit of key
// is held (an acquire would wait).
func (s *Semaphore) IsLocked(ctx context.Context, key string) (bool, error) {
	st, err := s.Holders(ctx, key)
	if err != nil {
		return false, err
	}
	return st.Permits > 0 && st.Free() <= 0, nil
}

// LookupKey implements syncguard.LockBackend: the live permit of key
// with the lowest slot, nil when none is held. Holders lists them all.
func (s *Semaphore) LookupKey(ctx context.Context, key string) (*syncguard.LockInfo, error) {
	st, err := s.Holders(ctx, key)
	if err != nil || len(st.Holders) == 0 {
		return nil, err
	}
	return st.Holders[0].info(), nil
}

// LookupID implements syncguard.LockBackend: the permit lockID, nil when
// it is not held.
func (s *Semaphore) LookupID(ctx context.Context, lockID string) (*syncguard.LockInfo, error) {
	h, err := s.LookupPermit(ctx, lockID)
	if err != nil || h == nil {
		return nil, err
	}
	return h.info(), nil
}

func (h Holder) info() *syncguard.LockInfo {
	return &syncguard.LockInfo{KeyHash: h.keyHash, LockIDHash: h.LockIDHash, ExpiresAt: h.ExpiresAt, AcquiredAt: h.AcquiredAt, Fence: h.Fence, Identity: h.Identity}
}

// Holding is a live permit of any key, as List returns it: a diagnostic,
// stale when it arrives (fences protect the resource, not lookups).
type Holding struct {
	Key     string // the key, in NFC form
	Permits int    // the key's number of permits
	Holder         // the permit: slot, fence, times, identity, lockId's hash
}

// List returns every live permit of every key, newest first (then by key
// and slot), in one statement, for diagnostics (the CLI's status and ls).
// It shows the keys, which may hold personal data: do not log it in
// production. The semaphore's tables must exist (SetupSchema).
func (s *Semaphore) List(ctx context.Context) ([]*Holding, error) {
	const op = "list"
	if err := ctx.Err(); err != nil {
		return nil, s.wrap(ctx, op, "", err)
	}
	rows, err := s.db.QueryContext(ctx, s.listSQL, s.args()...)
	if err != nil {
		return nil, s.wrap(ctx, op, "", err)
	}
	defer rows.Close()
	out := []*Holding{}
	for rows.Next() {
		var (
			h               Holding
			fence, acq, exp int64
		)
		if err := rows.Scan(&h.Key, &h.Permits, &h.Slot, &h.lockID, &fence, &acq, &exp, &h.Identity); err != nil {
			return nil, s.wrap(ctx, op, "", err)
		}
		f, _ := rules.FormatFence(fence)
		h.Fence, h.AcquiredAt, h.ExpiresAt = syncguard.Fence(f), time.UnixMilli(acq), time.UnixMilli(exp)
		h.LockIDHash, h.keyHash = rules.HashKey(h.lockID), rules.HashKey(h.Key)
		out = append(out, &h)
	}
	if err := rows.Err(); err != nil {
		return nil, s.wrap(ctx, op, "", err)
	}
	return out, nil
}
