package rwlock

import (
	"context"

	"github.com/syncguard/syncguard-go/internal/rules"
)

// Revoke forces every live lease of key out, shared and exclusive (stuck
// jobs, as an operator's last resort), and returns the leases it ended,
// oldest first, as List shows them; none when key had no live lease. It reads the key's leases
// and releases each by its lockId, as its holder's own release would (a
// writer's hands the key to the head of the queue in the same commit). It
// ends the leases found only: one that ended by itself meanwhile, and a
// later holder, are left alone. A holder learns it at its next extend (its
// lease ends with syncguard.ErrLockLost). The CLI's revoke uses it.
func (rw *RWLock) Revoke(ctx context.Context, key string) ([]*Holding, error) {
	hs, err := rw.Holders(ctx, key)
	if err != nil {
		return nil, err
	}
	k, _ := rules.DeriveKey(key) // valid: Holders checked it
	var out []*Holding
	for _, h := range hs {
		r, err := rw.release(ctx, h.lockID, "")
		if err != nil {
			return out, err
		}
		if r.OK {
			out = append(out, &Holding{Key: k.Norm, Holder: h})
		}
	}
	return out, nil
}
