package semaphore

import "context"

// Revoke forces every live permit of key out (stuck jobs, as an operator's
// last resort) and returns the key as Holders read it, with the permits
// it ended (by slot) as Holders; none when key had no live permit. It reads the key's permits and releases each by its
// lockId, as its holder's own release would: the slot goes to the first
// waiter in the same commit, with a larger slot fence. It ends the permits
// found only: one that ended by itself meanwhile, and a later holder of
// its slot, are left alone. A holder learns it at its next extend (its
// lease ends with syncguard.ErrLockLost). The CLI's revoke uses it.
func (s *Semaphore) Revoke(ctx context.Context, key string) (KeyStatus, error) {
	st, err := s.Holders(ctx, key)
	if err != nil {
		return KeyStatus{}, err
	}
	found := st.Holders
	st.Holders = nil
	for _, h := range found {
		r, err := s.Release(ctx, h.lockID)
		if err != nil {
			return st, err
		}
		if r.OK {
			st.Holders = append(st.Holders, h)
		}
	}
	return st, nil
}
