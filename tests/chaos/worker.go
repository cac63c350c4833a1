package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/syncguard/syncguard-go/syncguard"
	"github.com/syncguard/syncguard-go/tests/pgtest/history"
)

// worker is one load goroutine on one adapter.
type worker struct {
	r    *runner
	a    *adapter
	name string
	rng  *rand.Rand
	// crashed is set after the worker's first lost or abandoned holding,
	// which always writes as a zombie; a raw worker abandons its first
	// holding, so even a short run on a loaded machine has zombie writes
	// to check.
	crashed bool
}

// timed runs one operation with the op timeout on parent (the load's
// context, or a background one for what must run after the load ended),
// notes it with the outcome do reports, and returns when it was sent.
func (w *worker) timed(parent context.Context, key, op string, do func(ctx context.Context) (outcome string, err error)) (time.Time, error) {
	ctx, cancel := context.WithTimeout(parent, w.r.opts.OpTimeout)
	defer cancel()
	sent := time.Now()
	outcome, err := do(ctx)
	w.r.note(w.a, w.name, key, op, sent, time.Since(sent), outcome, err, w.a.bound)
	return sent, err
}

// okOr is an outcome: "ok", else the result's reason.
func okOr(ok bool, reason string) string {
	if ok {
		return "ok"
	}
	return reason
}

// backoff waits after the n-th consecutive error: 50 ms doubling to 800 ms,
// with equal jitter.
func (w *worker) backoff(n int) {
	d := min(50*time.Millisecond<<min(n-1, 4), 800*time.Millisecond)
	sleepCtx(w.r.ctx, d/2+time.Duration(w.rng.Int64N(int64(d/2)+1)))
}

// write writes to the fenced resource while the holder believes it holds
// the lock (before its last confirmed expiry).
func (w *worker) write(key, lockID string, fence int64, expiry time.Time) {
	if time.Now().Before(expiry) {
		w.r.res.put(w, key, lockID, fence, expiry, false)
	}
}

// zombie sometimes writes with the fence of a lock it lost, after a pause,
// as a process that stalled would: the resource must reject it once a newer
// holder wrote.
func (w *worker) zombie(key, lockID string, fence int64, expiry time.Time) {
	first := !w.crashed
	w.crashed = true
	if (!first && w.rng.IntN(3) != 0) || w.r.ctx.Err() != nil {
		return
	}
	sleepCtx(w.r.ctx, 1200*time.Millisecond)
	w.r.res.put(w, key, lockID, fence, expiry, true)
}

// runRaw: single attempts through the Backend, extends at the edge of
// expiry, a retry loop with backoff on errors.
func (w *worker) runRaw() {
	r, o := w.r, w.r.opts
	fails := 0
	for r.ctx.Err() == nil {
		key := r.keys[w.rng.IntN(len(r.keys))]
		var res syncguard.AcquireResult
		sent, err := w.timed(r.ctx, key, "acquire", func(ctx context.Context) (outcome string, err error) {
			res, err = w.a.b.Acquire(ctx, key, o.TTL)
			if res.OK {
				return "ok fence=" + string(res.Fence), err
			}
			return "locked", err
		})
		switch {
		case err != nil:
			fails++
			w.backoff(fails)
			continue
		case !res.OK:
			fails = 0
			sleepCtx(r.ctx, time.Duration(5+w.rng.IntN(30))*time.Millisecond)
			continue
		}
		fails = 0
		h := r.hist.Begin(key, w.name, res, o.TTL, sent, time.Now())
		w.holdRaw(h, key, res)
	}
}

func (w *worker) holdRaw(h *history.Holding, key string, res syncguard.AcquireResult) {
	r, o := w.r, w.r.opts
	fence, _ := res.Fence.Int64()
	expiry := res.ExpiresAt
	w.write(key, res.LockID, fence, expiry)
	extends := w.rng.IntN(3)
	lost := ""
	for i := 0; i < extends && lost == "" && r.ctx.Err() == nil; i++ {
		// At the edge: 100-350 ms before the confirmed expiry.
		edge := time.Duration(100+w.rng.IntN(250)) * time.Millisecond
		sleepCtx(r.ctx, time.Until(expiry.Add(-edge)))
		for r.ctx.Err() == nil {
			if !time.Now().Before(expiry) {
				lost = "lost:not extended before expiry"
				break
			}
			var x syncguard.ExtendResult
			_, err := w.timed(r.ctx, key, "extend", func(ctx context.Context) (outcome string, err error) {
				x, err = w.a.b.Extend(ctx, res.LockID, o.TTL)
				return okOr(x.OK, x.Reason), err
			})
			if err == nil {
				if x.OK {
					r.hist.Extended(h, x.ExpiresAt)
					expiry = x.ExpiresAt
					w.write(key, res.LockID, fence, expiry)
				} else {
					lost = "lost:" + x.Reason
				}
				break
			}
			sleepCtx(r.ctx, 30*time.Millisecond)
		}
	}
	if lost == "" {
		sleepCtx(r.ctx, time.Duration(w.rng.IntN(80))*time.Millisecond) // the work
		w.write(key, res.LockID, fence, expiry)
	}
	if (!w.crashed || w.rng.IntN(10) == 0) && r.ctx.Err() == nil {
		// The holder dies without releasing: the next holder has to wait
		// for the expiry plus the tolerance.
		r.hist.Ended(h, "abandoned", false)
		w.zombie(key, res.LockID, fence, expiry)
		return
	}
	w.release(h, key, lost, func(ctx context.Context) (syncguard.ReleaseResult, error) {
		return w.a.b.Release(ctx, res.LockID)
	})
	if lost != "" {
		w.zombie(key, res.LockID, fence, expiry)
	}
}

// release releases a holding, retrying errors for up to 3 s (also after
// the load ended, so the run leaves no lock behind).
func (w *worker) release(h *history.Holding, key, lost string, rel func(context.Context) (syncguard.ReleaseResult, error)) {
	r := w.r
	deadline := time.Now().Add(3 * time.Second)
	r.hist.ReleaseSent(h, time.Now())
	end, ok := "", false
	for {
		var res syncguard.ReleaseResult
		_, err := w.timed(context.Background(), key, "release", func(ctx context.Context) (outcome string, err error) {
			res, err = rel(ctx)
			return okOr(res.OK, res.Reason), err
		})
		if err == nil {
			ok = res.OK
			end = "released"
			if !ok {
				end = "release:" + res.Reason
			}
			break
		}
		if time.Now().After(deadline) {
			end = "release:error " + string(syncguard.CodeOf(err))
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if lost != "" {
		end = lost + "; " + end
	}
	r.hist.Ended(h, end, ok)
}

// acquisitionTimeout is the helper workers' AcquisitionOptions.Timeout.
const acquisitionTimeout = 2 * time.Second

// schedulingSlack is what a busy machine may add to a bound measured on the
// wall clock before the run calls it a violation.
const schedulingSlack = 10 * time.Second

// runHelper: the lock helper (syncguard.Lock) with AutoExtend, wrapped in
// a retry loop for backend errors (the helper retries contention only).
func (w *worker) runHelper() {
	r, o := w.r, w.r.opts
	opts := &syncguard.LockOptions{
		TTL:            o.TTL,
		AutoExtend:     true,
		Acquisition:    syncguard.AcquisitionOptions{Timeout: acquisitionTimeout, RetryDelay: 20 * time.Millisecond, MaxRetries: 1000},
		ReleaseTimeout: o.OpTimeout,
		Logger:         slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	// Lock must outlive the call (auto-extension stops with its ctx), so it
	// gets no deadline; a watchdog cancels a Lock call that outlives its
	// acquisition timeout by more than the adapter's attempt grace plus
	// schedulingSlack, and the run reports it. The slack keeps a loaded
	// machine (timers and goroutines running seconds late) from reading as
	// a violation; a helper that ignores its timeout still exceeds it.
	bound := acquisitionTimeout + w.a.attemptGrace + schedulingSlack
	fails := 0
	for r.ctx.Err() == nil {
		key := r.keys[w.rng.IntN(len(r.keys))]
		lctx, stop := context.WithCancel(r.ctx)
		watchdog := time.AfterFunc(bound, stop)
		sent := time.Now()
		lease, err := syncguard.Lock(lctx, w.a.b, key, opts)
		dur := time.Since(sent)
		fired := !watchdog.Stop()
		if fired && r.running.Load() {
			r.violate(history.Violation{Rule: "the lock helper returns within its acquisition timeout", Key: key,
				Detail: fmt.Sprintf("%s: syncguard.Lock (Acquisition.Timeout %v) still running after %v; cancelled it (it then returned %v)",
					w.name, acquisitionTimeout, bound, err)})
		}
		var se *syncguard.Error
		switch {
		case errors.As(err, &se) && se.Code == syncguard.ErrAcquisitionTimeout && syncguard.CodeOf(se.Err) != "":
			// An attempt was cut by the acquisition deadline: a fault, whose
			// cause must be transient.
			cause := syncguard.CodeOf(se.Err)
			r.note(w.a, w.name, key, "lock", sent, dur, "timeout:"+string(cause), nil, bound+time.Second)
			if !cause.Retryable() {
				r.checkErr(w.a, w.name, "lock", se.Err)
			}
			stop()
			fails++
			w.backoff(fails)
			continue
		case err != nil && syncguard.CodeOf(err) == syncguard.ErrAcquisitionTimeout:
			r.note(w.a, w.name, key, "lock", sent, dur, "contended", nil, bound+time.Second)
			fails = 0
			stop()
			continue
		case err != nil:
			if !fired {
				r.note(w.a, w.name, key, "lock", sent, dur, "", err, bound+time.Second)
			}
			stop()
			fails++
			w.backoff(fails)
			continue
		}
		fails = 0
		fence, _ := lease.Fence().Int64()
		r.note(w.a, w.name, key, "lock", sent, dur, "ok fence="+string(lease.Fence()), nil, bound+time.Second)
		first := lease.ExpiresAt()
		h := r.hist.Begin(key, w.name, syncguard.AcquireResult{OK: true, LockID: lease.LockID(), Fence: lease.Fence(), ExpiresAt: first},
			o.TTL, sent, time.Now())
		if fired {
			stop() // auto-extension stopped with it: hand the lock back
		}
		// Hold for 0.3-3 s, across several automatic extensions, writing to
		// the resource while the lease holds.
		holdUntil := time.Now().Add(time.Duration(300+w.rng.IntN(2700)) * time.Millisecond)
		lost := ""
		tick := time.NewTicker(100 * time.Millisecond)
	hold:
		for time.Now().Before(holdUntil) {
			select {
			case <-lease.Done():
				lost = "lost:" + lease.Err().Error()
				break hold
			case <-r.ctx.Done():
				break hold
			case <-tick.C:
				exp := lease.ExpiresAt()
				r.hist.Extended(h, exp)
				if lease.Err() == nil {
					w.write(key, lease.LockID(), fence, exp)
				}
			}
		}
		tick.Stop()
		r.hist.Extended(h, lease.ExpiresAt())
		w.release(h, key, lost, lease.Release)
		stop()
		if lost != "" {
			w.zombie(key, lease.LockID(), fence, lease.ExpiresAt())
		}
	}
}

// runWithLock: short critical sections through syncguard.WithLock (no
// auto-extension: the work is far shorter than the TTL).
func (w *worker) runWithLock() {
	r, o := w.r, w.r.opts
	opts := &syncguard.LockOptions{
		TTL:            o.TTL,
		Acquisition:    syncguard.AcquisitionOptions{Timeout: acquisitionTimeout, RetryDelay: 20 * time.Millisecond, MaxRetries: 1000},
		ReleaseTimeout: o.OpTimeout,
		Logger:         slog.New(slog.NewTextHandler(io.Discard, nil)),
		OnReleaseError: func(err error, info syncguard.ReleaseErrorInfo) {
			r.note(w.a, w.name, info.Key, "withlock-release", time.Now(), 0, "", err, time.Hour)
		},
	}
	bound := acquisitionTimeout + w.a.attemptGrace
	fails := 0
	for r.ctx.Err() == nil {
		key := r.keys[w.rng.IntN(len(r.keys))]
		ctx, cancel := context.WithTimeout(r.ctx, bound)
		var h *history.Holding
		sent := time.Now()
		err := syncguard.WithLock(ctx, w.a.b, key, func(ctx context.Context, lease *syncguard.Lease) error {
			h = r.hist.Begin(key, w.name, syncguard.AcquireResult{OK: true, LockID: lease.LockID(), Fence: lease.Fence(), ExpiresAt: lease.ExpiresAt()},
				o.TTL, sent, time.Now())
			fence, _ := lease.Fence().Int64()
			w.write(key, lease.LockID(), fence, lease.ExpiresAt())
			sleepCtx(ctx, time.Duration(10+w.rng.IntN(150))*time.Millisecond)
			w.write(key, lease.LockID(), fence, lease.ExpiresAt())
			r.hist.ReleaseSent(h, time.Now())
			return nil
		}, opts)
		dur := time.Since(sent)
		cancel()
		if h != nil {
			r.hist.Ended(h, "withlock", true)
		}
		switch {
		case err == nil:
			fails = 0
			r.note(w.a, w.name, key, "withlock", sent, dur, "ok", nil, bound+time.Second)
		case syncguard.CodeOf(err) == syncguard.ErrAcquisitionTimeout:
			fails = 0
			r.note(w.a, w.name, key, "withlock", sent, dur, "contended", nil, bound+time.Second)
		default:
			r.note(w.a, w.name, key, "withlock", sent, dur, "", err, bound+time.Second)
			fails++
			w.backoff(fails)
		}
	}
}
