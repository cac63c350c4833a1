package syncguard

import "context"

// Revoke forces the holder of key out (a stuck job, a leader to depose) and
// returns the holding it ended, or nil when key had no live holding to end.
// It looks up the live lock on key and releases it by its lockId, so the
// key goes to its first waiter in the same commit, as on the holder's own
// release, and the next fence of key is above the revoked one. It ends that
// holding only: if it ended by itself meanwhile, a later holder is left
// alone (nil). The holder learns it at its next extend: its lease ends with
// ErrLockLost (with AutoExtend within a third of its TTL; an election's
// term ends then), and fences reject its writes once the next holder has
// written. The lock kinds have their own (semaphore.Semaphore.Revoke, ...).
func (b *Backend) Revoke(ctx context.Context, key string) (*LockInfo, error) {
	h, err := b.LookupKeyDebug(ctx, key)
	if err != nil || h == nil {
		return nil, err
	}
	if r, err := b.Release(ctx, h.LockID); err != nil || !r.OK {
		return nil, err
	}
	return sanitized(h, nil)
}
