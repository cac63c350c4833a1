package syncguardtest

import (
	"context"
	"time"

	"github.com/syncguard/syncguard-go/internal/rules"
	"github.com/syncguard/syncguard-go/syncguard"
)

// wait sleeps d, or returns the real backend's error for ctx if it ends
// first.
func (b *Backend) wait(ctx context.Context, c Call, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return b.check.ctxErr(ctx, c)
	}
}

// record returns the record of lockID, or nil. Caller holds mu.
func (b *Backend) record(lockID string) *record {
	if k, ok := b.byID[lockID]; ok {
		return b.locks[k]
	}
	return nil
}

// live returns r if it is live at now, else nil.
func (b *Backend) live(r *record, now int64) *record {
	if r == nil || !rules.IsLive(r.expiresMs, now) {
		return nil
	}
	return r
}

// failReason is why a release or extend of r does nothing at now: ""
// when r is live.
func failReason(r *record, now int64) string {
	switch {
	case r == nil:
		return syncguard.ReasonNotFound
	case !rules.IsLive(r.expiresMs, now):
		return syncguard.ReasonExpired
	}
	return ""
}

func info(r *record) *syncguard.LockInfo {
	if r == nil {
		return nil
	}
	return &syncguard.LockInfo{
		KeyHash:    syncguard.HashKey(r.key),
		LockIDHash: syncguard.HashKey(r.lockID),
		ExpiresAt:  time.UnixMilli(r.expiresMs),
		AcquiredAt: time.UnixMilli(r.acquired),
		Fence:      r.fence,
		Identity:   r.identity,
		Key:        r.key,
		LockID:     r.lockID,
	}
}
