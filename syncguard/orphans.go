package syncguard

import (
	"context"
	"time"

	"github.com/syncguard/syncguard-go/internal/orphans"
)

// newOrphans is the Backend's background release of acquires whose
// outcome is unknown (internal/orphans says when and how).
func newOrphans(s *shared) *orphans.Queue {
	return orphans.New(func(ctx context.Context, ids string) (string, error) {
		var out string
		err := (&Backend{shared: s}).oneShot(ctx, s.sql.releaseOrphans, []any{ids}, []any{&out})
		return out, err
	}, s.cfg.logger, s.cfg.releaseTimeout)
}

// releaseInBackground hands lockID, of an acquire with the given ttl whose
// outcome is unknown, to the Backend's background release.
func (s *shared) releaseInBackground(lockID string, ttl time.Duration) { s.orphans.Add(lockID, ttl) }
