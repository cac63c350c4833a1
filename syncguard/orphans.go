package syncguard

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/syncguard/syncguard-go/internal/rules"
)

// The background release of acquires of unknown outcome ("A cancelled
// acquire" in docs/errors.md): one worker per Backend while any is pending,
// one statement per batch, retried while not found (the statement may
// commit after the client gave up), never past the lock's expiry.

const (
	maxOrphans  = 4096 // pending at most; the newest beyond are left to expire
	orphanBatch = 100  // lockIds per statement
)

// orphanRetries are the waits before each retry of a lockId not found.
var orphanRetries = [...]time.Duration{50 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond,
	400 * time.Millisecond, 800 * time.Millisecond, 1600 * time.Millisecond, 3200 * time.Millisecond}

// orphanErrorDelay is the wait after a failed batch (not a retry).
const orphanErrorDelay = 500 * time.Millisecond

// releaseInBackground hands lockID, of an acquire of unknown outcome, over.
func (s *shared) releaseInBackground(lockID string, ttl time.Duration) {
	q := s.orphans
	now := time.Now()
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.pending) >= maxOrphans {
		if !q.warned {
			q.warned = true
			s.cfg.Logger.Warn("syncguard: background release queue full; locks of cancelled acquires that may have committed are left to expire with their TTL",
				slog.Int("queued", len(q.pending)), slog.String("lockIdHash", rules.HashKey(lockID)))
		}
		return
	}
	q.pending = append(q.pending, orphan{lockID: lockID, due: now, until: now.Add(ttl + rules.ToleranceMs*time.Millisecond)})
	if q.wake == nil {
		q.wake = make(chan struct{}, 1)
	}
	select {
	case q.wake <- struct{}{}:
	default:
	}
	if !q.running {
		q.running = true
		go q.run()
	}
}

// run is the worker, until nothing is pending.
func (q *orphanQueue) run() {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		now := time.Now()
		q.mu.Lock()
		var batch []string
		next := time.Time{}
		keep := q.pending[:0]
		for _, o := range q.pending {
			switch {
			case !now.Before(o.until):
				continue // expired by itself
			case len(batch) < orphanBatch && !o.due.After(now):
				batch = append(batch, o.lockID)
			default:
				if next.IsZero() || o.due.Before(next) {
					next = o.due
				}
			}
			keep = append(keep, o)
		}
		q.pending = keep
		if len(q.pending) == 0 {
			q.running = false
			q.mu.Unlock()
			return
		}
		q.mu.Unlock()

		if len(batch) == 0 {
			timer.Reset(time.Until(next))
			select {
			case <-timer.C:
			case <-q.wake:
				timer.Stop()
			}
			continue
		}
		deleted, err := q.releaseBatch(batch)
		now = time.Now()
		q.mu.Lock()
		for i := range q.pending {
			o := &q.pending[i]
			if o.due.After(now) || !slices.Contains(batch, o.lockID) {
				continue
			}
			switch {
			case err != nil:
				o.due = now.Add(orphanErrorDelay)
			case deleted[o.lockID]:
				o.until = now // done
			case o.retries < len(orphanRetries):
				o.due = now.Add(orphanRetries[o.retries])
				o.retries++
			default:
				o.until = now // never committed, as far as anyone can tell
			}
		}
		q.mu.Unlock()
	}
}

// releaseBatch deletes the rows of ids in one statement (lockIds joined by
// ',', returning those deleted the same way) and returns those.
func (q *orphanQueue) releaseBatch(ids []string) (map[string]bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), q.s.cfg.ReleaseTimeout)
	defer cancel()
	var out string
	b, args := &Backend{shared: q.s}, []any{strings.Join(ids, ",")}
	err := b.oneShot(ctx, q.s.sql.releaseOrphans[b2i(!q.s.noQueue.Load())], args, []any{&out})
	if err != nil && ctx.Err() == nil && q.s.queueLost(err) {
		err = b.oneShot(ctx, q.s.sql.releaseOrphans[0], args, []any{&out})
	}
	if err != nil {
		return nil, err
	}
	deleted := map[string]bool{}
	for _, id := range strings.Split(out, ",") {
		if id != "" {
			deleted[id] = true
		}
	}
	return deleted, nil
}
