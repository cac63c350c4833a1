package semaphore

import (
	"context"

	"github.com/syncguard/syncguard-go/internal/rules"
)

// Revoke forces every live permit of key out (stuck jobs, as an operator's
// last resort) and returns the permits it ended, by slot, as List shows
// them; none when key had no live permit. It reads the key's permits and
// releases each by its lockId, as its holder's own release would: the slot
// goes to the first waiter in the same commit, with a larger slot fence.
// It ends the permits found only: one that ended by itself meanwhile, and
// a later holder of its slot, are left alone. A holder learns it at its
// next extend (its lease ends with syncguard.ErrLockLost). The CLI's
// revoke uses it.
func (s *Semaphore) Revoke(ctx context.Context, key string) ([]*Holding, error) {
	st, err := s.Holders(ctx, key)
	if err != nil {
		return nil, err
	}
	k, _ := rules.DeriveKey(key) // valid: Holders checked it
	var out []*Holding
	for _, h := range st.Holders {
		r, err := s.Release(ctx, h.lockID)
		if err != nil {
			return out, err
		}
		if r.OK {
			out = append(out, &Holding{Key: k.Norm, Permits: st.Permits, Holder: h})
		}
	}
	return out, nil
}
