package multilock

import (
	"context"

	"github.com/syncguard/syncguard-go/syncguard"
	"golang.org/x/text/unicode/norm"
)

// SetLocker is what Lock needs: a syncguard.Locker of encoded sets (Keys)
// that reports the per-key fences of a holding. *Locker is one, and so is
// the in-memory fake of package syncguardtest (NewMultiLock).
type SetLocker interface {
	syncguard.Locker
	// Fences returns each key of the holding lockID with its fence, in
	// canonical order; nil when the lockId holds nothing.
	Fences(ctx context.Context, lockID string) ([]KeyFence, error)
}

// Lease is a held set: a *syncguard.Lease (TTL, AutoExtend, Done, Extend,
// Close, all for every key at once) with the fence of each key.
type Lease struct {
	*syncguard.Lease
	fences []KeyFence
}

// Fences returns each key of the set with its fence, in canonical order.
func (l *Lease) Fences() []KeyFence { return append([]KeyFence(nil), l.fences...) }

// FenceOf returns the fence of key (any normalization form) in this
// holding; false when key is not in the set.
func (l *Lease) FenceOf(key string) (syncguard.Fence, bool) {
	key = norm.NFC.String(key)
	for _, f := range l.fences {
		if f.Key == key {
			return f.Fence, true
		}
	}
	return "", false
}

// Keys returns the keys of the set, in canonical order.
func (l *Lease) Keys() []string {
	ks := make([]string, len(l.fences))
	for i, f := range l.fences {
		ks[i] = f.Key
	}
	return ks
}

// Lock takes every key of keys at once, waiting as syncguard.Lock waits
// (opts: nil for the defaults; Acquisition.Timeout bounds the whole wait,
// once, not per key), and returns the Lease of the set with each key's
// fence. The keys may be named in any order; an empty, invalid or
// duplicate key, or more than MaxKeys, is an InvalidArgument
// *syncguard.Error before any I/O. End the lease with Close.
func Lock(ctx context.Context, l SetLocker, keys []string, opts *syncguard.LockOptions) (*Lease, error) {
	if l == nil {
		return nil, invalidArg("lock", "locker must not be nil")
	}
	set := Keys(keys...)
	if _, e := parse("lock", set); e != nil {
		return nil, e
	}
	lease, err := syncguard.Lock(ctx, l, set, opts)
	if err != nil {
		return nil, err
	}
	f, err := l.Fences(ctx, lease.LockID())
	if err == nil && len(f) != len(keys) {
		err = &syncguard.Error{Op: "lock", Code: syncguard.CodeInternal, Key: set, Msg: "the holding's fences could not be read back",
			Err: syncguard.ErrLockLost}
	}
	if err != nil {
		lease.Close()
		return nil, err
	}
	return &Lease{Lease: lease, fences: f}, nil
}

// WithLock runs fn while holding every key of keys, as syncguard.WithLock
// does for one key: the set is released when fn returns, fails or panics.
// It returns fn's error unchanged.
func WithLock(ctx context.Context, l SetLocker, keys []string, fn func(ctx context.Context, lease *Lease) error, opts *syncguard.LockOptions) error {
	if fn == nil {
		return invalidArg("lock", "fn must not be nil")
	}
	lease, err := Lock(ctx, l, keys, opts)
	if err != nil {
		return err
	}
	defer lease.Close()
	fnCtx := ctx
	if opts != nil && opts.AutoExtend {
		var cancel context.CancelFunc
		fnCtx, cancel = lease.Bind(ctx)
		defer cancel()
	}
	return fn(fnCtx, lease)
}
