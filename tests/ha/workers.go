package ha

import (
	"context"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/syncguard/syncguard-go/syncguard"
	"github.com/syncguard/syncguard-go/tests/pgtest/history"
)

// backoff after the n-th consecutive error: 50 ms doubling to 800 ms.
func backoff(ctx context.Context, rng *rand.Rand, n int) {
	d := min(50*time.Millisecond<<min(n-1, 4), 800*time.Millisecond)
	sleepCtx(ctx, d/2+time.Duration(rng.Int64N(int64(d/2)+1)))
}

func sleepCtx(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

const (
	hotTTL             = 3 * time.Second
	acquisitionTimeout = 2 * time.Second
	opTimeout          = 3 * time.Second
)

// lockOptions are the options of the load's locks, for the client named
// client (the mutex workers' adapter, the lock kinds' client).
func (r *runner) lockOptions(client string, autoExtend bool) *syncguard.LockOptions {
	return &syncguard.LockOptions{
		TTL:            hotTTL,
		AutoExtend:     autoExtend,
		Acquisition:    syncguard.AcquisitionOptions{Timeout: acquisitionTimeout, RetryDelay: 20 * time.Millisecond, MaxRetries: 1000},
		ReleaseTimeout: opTimeout,
		Logger:         discard(),
		OnReleaseError: func(err error, info syncguard.ReleaseErrorInfo) { r.noteAs(client, "release", "", err) },
	}
}

// withLockWorker runs short critical sections through syncguard.WithLock.
func (r *runner) withLockWorker(a *adapter, name string, rng *rand.Rand) {
	opts := r.lockOptions(a.name, false)
	fails := 0
	for r.ctx.Err() == nil {
		key := r.keys[rng.IntN(len(r.keys))]
		var h *history.Holding
		sent := time.Now()
		ctx, cancel := context.WithTimeout(r.ctx, acquisitionTimeout+opTimeout)
		err := syncguard.WithLock(ctx, a.b, key, func(ctx context.Context, lease *syncguard.Lease) error {
			a.succeeded(sent)
			h = r.hist.Begin(key, name, acquired(lease), hotTTL, sent, time.Now())
			sleepCtx(ctx, time.Duration(10+rng.IntN(100))*time.Millisecond)
			r.hist.ReleaseSent(h, time.Now())
			return nil
		}, opts)
		cancel()
		switch {
		case err == nil:
			fails = 0
			r.note(a, "withlock", "ok", nil)
		case syncguard.CodeOf(err) == syncguard.ErrAcquisitionTimeout:
			r.note(a, "withlock", "", err)
		default:
			r.note(a, "withlock", "", err)
			fails++
			backoff(r.ctx, rng, fails)
		}
	}
}

// leaseWorker takes a Lease with AutoExtend through syncguard.Lock, holds
// it for 0.2-2 s (across automatic extensions), and releases it.
func (r *runner) leaseWorker(a *adapter, name string, rng *rand.Rand) {
	opts := r.lockOptions(a.name, true)
	fails := 0
	for r.ctx.Err() == nil {
		key := r.keys[rng.IntN(len(r.keys))]
		sent := time.Now()
		lctx, stop := context.WithCancel(r.ctx)
		lease, err := syncguard.Lock(lctx, a.b, key, opts)
		if err != nil {
			stop()
			r.note(a, "lock", "", err)
			if syncguard.CodeOf(err) != syncguard.ErrAcquisitionTimeout {
				fails++
				backoff(r.ctx, rng, fails)
			}
			continue
		}
		fails = 0
		a.succeeded(sent)
		r.note(a, "lock", "ok", nil)
		h := r.hist.Begin(key, name, acquired(lease), hotTTL, sent, time.Now())
		holdUntil := time.Now().Add(time.Duration(200+rng.IntN(1800)) * time.Millisecond)
		tick := time.NewTicker(100 * time.Millisecond)
		lost := ""
	hold:
		for time.Now().Before(holdUntil) {
			select {
			case <-lease.Done():
				lost = lease.Err().Error()
				break hold
			case <-r.ctx.Done():
				break hold
			case <-tick.C:
				r.hist.Extended(h, lease.ExpiresAt())
			}
		}
		tick.Stop()
		r.hist.Extended(h, lease.ExpiresAt())
		if lost != "" {
			r.repMu.Lock()
			r.rep.LeaseLosses[leaseLossKind(lost)]++
			r.repMu.Unlock()
		}
		r.hist.ReleaseSent(h, time.Now())
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		res, err := lease.Release(ctx)
		cancel()
		stop()
		if err != nil && lost == "" {
			r.note(a, "release", "", err)
		} else if err == nil {
			r.note(a, "release", map[bool]string{true: "ok", false: res.Reason}[res.OK], nil)
		}
	}
}

func leaseLossKind(msg string) string {
	switch {
	case strings.Contains(msg, "expired"):
		return "extend found it expired"
	case strings.Contains(msg, "gone"):
		return "extend found it gone"
	case strings.Contains(msg, "not extended"):
		return "not extended in time"
	}
	return msg
}

// acquired is what the hot-key history records of a lease's acquire.
func acquired(l *syncguard.Lease) syncguard.AcquireResult {
	return syncguard.AcquireResult{OK: true, LockID: l.LockID(), Fence: l.Fence(), ExpiresAt: l.ExpiresAt()}
}
