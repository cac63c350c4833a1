package semaphore

import (
	"context"
	"database/sql"
	"strconv"
	"time"

	"github.com/syncguard/syncguard-go/internal/kit"
	"github.com/syncguard/syncguard-go/internal/rules"
	"github.com/syncguard/syncguard-go/syncguard"
)

// Holder is one live permit, as Holders reads it.
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

// Holders reads the key's number of permits and its live permits, in one
// statement.
func (s *Semaphore) Holders(ctx context.Context, key string) (KeyStatus, error) {
	k, err := kit.CheckKey("lookup", key)
	if err != nil {
		return KeyStatus{}, err
	}
	st, err := s.read(ctx, k.Storage, nil)
	return st, kit.SetKey(err, key)
}

// lookupPermit returns the live permit lockID, nil when it is not held.
func (s *Semaphore) lookupPermit(ctx context.Context, lockID string) (*Holder, error) {
	if e := kit.CheckLockID("lookup", lockID); e != nil {
		return nil, e
	}
	st, err := s.read(ctx, nil, lockID)
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

func (s *Semaphore) read(ctx context.Context, storage, lockID any) (KeyStatus, error) {
	var st KeyStatus
	err := s.k.Each(ctx, "lookup", s.holdersSQL, []any{storage, lockID}, func(scan func(...any) error) error {
		var (
			now                            int64
			permits, slot, exp, acq, fence sql.NullInt64
			id, ident, userKey             sql.NullString
		)
		if err := scan(&now, &permits, &slot, &id, &exp, &acq, &fence, &ident, &userKey); err != nil {
			return err
		}
		st.Now, st.Permits = time.UnixMilli(now), int(permits.Int64)
		if slot.Valid && id.Valid && rules.IsLive(exp.Int64, now) {
			st.Holders = append(st.Holders, Holder{Slot: int(slot.Int64), Fence: kit.Fence(fence.Int64), AcquiredAt: time.UnixMilli(acq.Int64),
				ExpiresAt: time.UnixMilli(exp.Int64), Identity: ident.String, LockIDHash: rules.HashKey(id.String), lockID: id.String, keyHash: rules.HashKey(userKey.String)})
		}
		return nil
	})
	return st, err
}

// IsLocked implements syncguard.LockBackend: whether every permit of key
// is held (an acquire would wait).
func (s *Semaphore) IsLocked(ctx context.Context, key string) (bool, error) {
	st, err := s.Holders(ctx, key)
	if err != nil {
		return false, err
	}
	return st.Permits > 0 && len(st.Holders) >= st.Permits, nil
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
	h, err := s.lookupPermit(ctx, lockID)
	if err != nil || h == nil {
		return nil, err
	}
	return h.info(), nil
}

func (h Holder) info() *syncguard.LockInfo {
	return &syncguard.LockInfo{KeyHash: h.keyHash, LockIDHash: h.LockIDHash, ExpiresAt: h.ExpiresAt, AcquiredAt: h.AcquiredAt, Fence: h.Fence, Identity: h.Identity}
}

// Holding is a live permit of any key, as List returns it (a Holder's
// diagnostics).
type Holding struct {
	Key     string // the key, in NFC form
	Permits int    // the key's number of permits
	Holder         // the permit: slot, fence, times, identity, lockId's hash
}

// List returns every live permit of every key, newest first (then by key
// and slot), in one statement, for the CLI's status and ls. It shows the
// keys, which may hold personal data: do not log it in production.
func (s *Semaphore) List(ctx context.Context) ([]*Holding, error) {
	return kit.List(ctx, s.k, "list", s.listSQL, nil, func(scan func(...any) error) (*Holding, error) {
		h, ms := &Holding{}, [3]int64{} // fence, acquired, expires
		err := scan(&h.Key, &h.Permits, &h.Slot, &h.lockID, &ms[0], &ms[1], &ms[2], &h.Identity)
		h.Fence, h.AcquiredAt, h.ExpiresAt = kit.Fence(ms[0]), time.UnixMilli(ms[1]), time.UnixMilli(ms[2])
		h.LockIDHash, h.keyHash = rules.HashKey(h.lockID), rules.HashKey(h.Key)
		return h, err
	})
}

// Revoke forces every live permit of key out (an operator's last resort:
// the CLI's revoke), as its holder's release would (kit.Revoke), and
// returns those it ended, by slot; a holder learns it at its next extend
// (syncguard.ErrLockLost).
func (s *Semaphore) Revoke(ctx context.Context, key string) ([]*Holding, error) {
	st, err := s.Holders(ctx, key)
	if err != nil {
		return nil, err
	}
	k, _ := rules.DeriveKey(key) // valid: Holders checked it
	var in []*Holding
	for _, h := range st.Holders {
		in = append(in, &Holding{Key: k.Norm, Permits: st.Permits, Holder: h})
	}
	return kit.Revoke(ctx, in, func(ctx context.Context, h *Holding) (syncguard.ReleaseResult, error) {
		return s.Release(ctx, h.lockID)
	})
}

// Permit is a held permit: a *syncguard.Lease (TTL, AutoExtend, Done and
// the loss signal, Release and Close, Fence) and the slot it holds.
type Permit struct {
	*syncguard.Lease
	// Slot is the permit's slot, 1..Permits. Its fence (Lease.Fence) is
	// strictly greater than every fence handed out before for the same
	// key and slot: a resource keeps the highest fence it has seen per
	// FenceKey and rejects a write carrying a lower one.
	Slot int
}

// FenceKey is the name of the fence counter of the permit's slot:
// FenceKey(key, slot).
func (p *Permit) FenceKey() string { return FenceKey(p.Key(), p.Slot) }

// FenceKey names the fence counter of one slot of a semaphore key, for a
// resource that checks fences: "<key>#<slot>". Fences of different slots
// are not comparable (each slot counts on its own); fences of one slot
// strictly increase, so each slot is a fenced mutex.
func FenceKey(key string, slot int) string { return key + "#" + strconv.Itoa(slot) }

// Lock waits for a permit of key in FIFO order (syncguard.Lock with opts)
// and returns it with its slot. The caller ends it, usually with defer
// p.Close().
func (s *Semaphore) Lock(ctx context.Context, key string, opts *syncguard.LockOptions) (*Permit, error) {
	lease, err := syncguard.Lock(ctx, s, key, opts)
	if err != nil {
		return nil, err
	}
	if slot, ok := s.Slot(lease.LockID()); ok {
		return &Permit{Lease: lease, Slot: slot}, nil
	}
	h, err := s.lookupPermit(ctx, lease.LockID())
	if err != nil || h == nil {
		lease.Close()
		if err == nil {
			err = &syncguard.Error{Op: "lock", Code: syncguard.ErrInvalidArgument, Key: lease.Key(), Err: syncguard.ErrLockLost,
				Msg: "the permit was lost before its slot could be read"}
		}
		return nil, err
	}
	return &Permit{Lease: lease, Slot: h.Slot}, nil
}
