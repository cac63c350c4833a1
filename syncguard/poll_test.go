package syncguard_test

import (
	"context"
	"math/rand/v2"
	"testing"
	"testing/synctest"
	"time"

	"github.com/syncguard/syncguard-go/internal/kit"
	"github.com/syncguard/syncguard-go/internal/waiting"
	"github.com/syncguard/syncguard-go/syncguard"
	"github.com/syncguard/syncguard-go/syncguardtest"
)

// pollingQueue is the fake's queue with waiters no notification reaches:
// they poll, as a Backend's do while its LISTEN connection is
// not confirmed (a probe timed out on a loaded server, a pooler).
type pollingQueue struct{ *syncguardtest.Backend }

func (q pollingQueue) Queue(key, identity string, once bool) kit.Wait {
	return &pollingWaiter{Wait: q.Backend.Queue(key, identity, once)}
}

type pollingWaiter struct {
	kit.Wait
	pace waiting.Pace
}

func (w *pollingWaiter) Attempt(ctx context.Context, ttl time.Duration) (syncguard.AcquireResult, error) {
	sent := time.Now()
	res, err := w.Wait.Attempt(ctx, ttl)
	w.pace.Attempted(sent, err == nil, err == nil && res.OK, res.RetryIn)
	return res, err
}

func (w *pollingWaiter) Next(retry time.Time) (<-chan struct{}, time.Time) {
	return w.pace.Next(retry, waiting.Hint{Renew: 10 * time.Second, Poll: true}) // nothing wakes it: it polls
}

// A polling waiter behind a holder that stays polls less and less: after
// a minute it attempts about once a second (pollStall), not every 25 ms
// (2,400 attempts a minute: what 1,000 waiters whose LISTEN probes timed
// out cost the server at once); a release after that long hold is found
// within the second.
func TestPollingBacksOffWhileTheHolderStays(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := syncguardtest.New()
		held := hold(t, b, "k")
		attempts := 0
		opts := &syncguard.LockOptions{Acquisition: syncguard.AcquisitionOptions{Timeout: time.Minute},
			OnAttempt: func(syncguard.AcquireResult, error) { attempts++ }}
		_, err := syncguard.Lock(t.Context(), pollingQueue{b}, "k", opts)
		requireCode(t, err, syncguard.ErrAcquisitionTimeout)
		// 2 s of scheduled retries (about 20), the doubling to a second
		// (about 15), then one a second: about 95.
		if attempts > 150 || attempts < 40 {
			t.Errorf("a minute behind one holder: %d attempts, want 40-150 (polling backs off to one a second while the holder stays)", attempts)
		}

		// The holder releases after a long hold: a waiter polling behind
		// it finds the key within pollStall.
		go func() {
			time.Sleep(30 * time.Second)
			if r, err := b.Release(context.Background(), held.LockID); err != nil || !r.OK {
				t.Errorf("release: %+v %v", r, err)
			}
		}()
		start := time.Now()
		lease, err := syncguard.Lock(t.Context(), pollingQueue{b}, "k", &syncguard.LockOptions{Acquisition: syncguard.AcquisitionOptions{Timeout: -1}})
		if err != nil {
			t.Fatal(err)
		}
		if late := time.Since(start) - 30*time.Second; late > time.Second+50*time.Millisecond {
			t.Errorf("the key was free %v before the polling waiter took it, want at most a second (pollStall)", late)
		}
		if _, err := lease.Release(context.Background()); err != nil {
			t.Error(err)
		}
	})
}

// scriptedWaiter's attempts find the key held until free, by a holder
// whose lock expires at expiry(now); it polls.
type scriptedWaiter struct {
	expiry   func(now time.Time) time.Time
	free     time.Time
	attempts []time.Time
	slow     func() time.Duration // each way, if set: a loaded server
	pace     waiting.Pace
}

func (w *scriptedWaiter) Attempt(context.Context, time.Duration) (syncguard.AcquireResult, error) {
	sent := time.Now()
	res, err := w.attempt()
	w.pace.Attempted(sent, err == nil, err == nil && res.OK, res.RetryIn)
	return res, err
}

func (w *scriptedWaiter) attempt() (syncguard.AcquireResult, error) {
	w.attempts = append(w.attempts, time.Now())
	if w.slow != nil {
		time.Sleep(w.slow())
		defer time.Sleep(w.slow())
	}
	now := time.Now()
	if !now.Before(w.free) {
		return syncguard.AcquireResult{OK: true, LockID: "0123456789abcdefghijkl", ExpiresAt: now.Add(time.Minute)}, nil
	}
	return syncguard.AcquireResult{Reason: syncguard.ReasonLocked, RetryIn: w.expiry(now).Sub(now)}, nil
}
func (w *scriptedWaiter) Next(retry time.Time) (<-chan struct{}, time.Time) {
	return w.pace.Next(retry, waiting.Hint{Renew: time.Hour, Poll: true})
}
func (w *scriptedWaiter) Leave(context.Context) error { return nil }

type scriptedQueue struct {
	*syncguardtest.Backend
	w *scriptedWaiter
}

func (q scriptedQueue) Queue(string, string, bool) kit.Wait { return q.w }

// After a long hold has slowed the polling to a second, a hand-off resets
// it: behind holders that each hold 100 ms the waiter polls every 25 ms
// again (about 40 attempts in that second, not 1 or 2).
func TestPollingResetsAtAHandOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		w := &scriptedWaiter{free: t0.Add(32 * time.Second), expiry: func(now time.Time) time.Time {
			since := now.Sub(t0)
			if since < 30*time.Second {
				return t0.Add(time.Hour)
			}
			return t0.Add(time.Hour + since.Truncate(100*time.Millisecond)) // a new holder every 100 ms
		}}
		_, err := syncguard.Lock(t.Context(), scriptedQueue{syncguardtest.New(), w}, "k", &syncguard.LockOptions{Acquisition: syncguard.AcquisitionOptions{Timeout: -1}})
		if err != nil {
			t.Fatal(err)
		}
		// The first poll after the hand-off comes up to a second late (the
		// pace set by the long hold); from it on, every 25 ms.
		var first time.Time
		n := 0
		for _, a := range w.attempts {
			switch {
			case first.IsZero() && a.Sub(t0) >= 30*time.Second:
				first = a
			case !first.IsZero() && a.Sub(first) <= 500*time.Millisecond:
				n++
			}
		}
		if n < 15 {
			t.Errorf("behind holders of 100 ms after a 30 s hold: %d attempts in the 500 ms after the first poll that saw a new holder, want at least 15 (polling at 25 ms again after a hand-off)", n)
		}
	})
}

// On a loaded server the answers come 0-80 ms late, each differently: the
// holder's expiry as each attempt sees it moves by as much, and must not
// read as a new holder (which would keep the polling at 25 ms).
func TestPollingBacksOffOnALoadedServer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		rng := rand.New(rand.NewPCG(1, 2))
		w := &scriptedWaiter{free: t0.Add(time.Minute), expiry: func(time.Time) time.Time { return t0.Add(time.Hour) },
			slow: func() time.Duration { return time.Duration(rng.IntN(40)) * time.Millisecond }}
		if _, err := syncguard.Lock(t.Context(), scriptedQueue{syncguardtest.New(), w}, "k", &syncguard.LockOptions{Acquisition: syncguard.AcquisitionOptions{Timeout: -1}}); err != nil {
			t.Fatal(err)
		}
		if n := len(w.attempts); n > 150 {
			t.Errorf("a minute behind one holder, answers 0-80 ms late: %d attempts, want at most 150 (answer latency read as a new holder?)", n)
		}
	})
}
