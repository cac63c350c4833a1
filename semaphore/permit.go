package semaphore

import (
	"context"
	"strconv"

	"github.com/syncguard/syncguard-go/syncguard"
)

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
	return s.permit(ctx, lease)
}

func (s *Semaphore) permit(ctx context.Context, lease *syncguard.Lease) (*Permit, error) {
	if slot, ok := s.Slot(lease.LockID()); ok {
		return &Permit{Lease: lease, Slot: slot}, nil
	}
	h, err := s.LookupPermit(ctx, lease.LockID())
	if err != nil || h == nil {
		lease.Close()
		if err == nil {
			err = &syncguard.Error{Op: "lock", Code: syncguard.CodeInvalidArgument, Key: lease.Key(), Err: syncguard.ErrLockLost,
				Msg: "the permit was lost before its slot could be read"}
		}
		return nil, err
	}
	return &Permit{Lease: lease, Slot: h.Slot}, nil
}

// WithPermit runs fn while holding a permit of key and releases it
// afterwards, as syncguard.WithLock does (with AutoExtend, fn's context
// is cancelled when the permit is lost).
func (s *Semaphore) WithPermit(ctx context.Context, key string, fn func(ctx context.Context, p *Permit) error, opts *syncguard.LockOptions) error {
	if fn == nil {
		return invalidArg("lock", "fn must not be nil")
	}
	return syncguard.WithLock(ctx, s, key, func(ctx context.Context, lease *syncguard.Lease) error {
		p, err := s.permit(ctx, lease)
		if err != nil {
			return err
		}
		return fn(ctx, p)
	}, opts)
}
