package syncguard

import "sync"

// keptSet holds the lockIds of this Backend's locks taken by an 'open'
// attempt (acquire.sql: the key's advisory lock was held by someone
// else, usually a role that holds the key's id for good). Their release
// keeps the lock row, expired (release_keep.sql), so that the next
// acquire of the key takes a row over under row locks instead of writing
// a placeholder and reading pg_locks, whose cost grows with every lock
// any role holds ("The advisory try-lock" in docs/design.md). A hint
// only: a lockId that is not here is released with a delete, as always.
// Bounded: a lease that never releases leaves its entry, so at most
// keptMax entries; past that, releases delete.
type keptSet struct {
	mu  sync.Mutex
	ids map[string]struct{}
}

const keptMax = 4096

func (k *keptSet) add(lockID string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.ids == nil {
		k.ids = make(map[string]struct{})
	}
	if len(k.ids) < keptMax {
		k.ids[lockID] = struct{}{}
	}
}

// take reports whether lockID was added, and forgets it.
func (k *keptSet) take(lockID string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	_, ok := k.ids[lockID]
	delete(k.ids, lockID)
	return ok
}
