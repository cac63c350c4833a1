package multilock

import (
	"context"
	"slices"
	"strings"
)

// Revoke forces out every live holding whose set has key (stuck jobs, as
// an operator's last resort) and returns the holdings it ended, by set,
// as List shows them;
// none when no live set holds key. It reads them and releases each by its
// lockId, as its holder's own release would: each of the set's keys goes
// to its first waiter in the same commit. It ends the holdings found only:
// one that ended by itself meanwhile, and a later holder, are left alone.
// A holder learns it at its next extend (its lease ends with
// syncguard.ErrLockLost). The CLI's revoke uses it.
func (l *Locker) Revoke(ctx context.Context, key string) ([]*Holding, error) {
	hs, _, err := l.lookup(ctx, "revoke", "", Keys(key), false)
	if err != nil {
		return nil, err
	}
	ids := make([]string, 0, len(hs))
	for id := range hs {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, func(a, b string) int { return strings.Compare(hs[a].Set, hs[b].Set) })
	var out []*Holding
	for _, id := range ids {
		r, err := l.Release(ctx, id)
		if err != nil {
			return out, err
		}
		if r.OK {
			out = append(out, hs[id])
		}
	}
	return out, nil
}
