package waiting

import (
	"testing"
	"testing/synctest"
	"time"
)

// The rules of Pace, one at a time, on the synctest clock.
func TestPace(t *testing.T) {
	wake := make(chan struct{}, 1)
	attempt := func(p *Pace, answered, ok bool, retryIn time.Duration) {
		p.Attempted(time.Now(), answered, ok, retryIn)
	}
	in := func(at time.Time) time.Duration { return at.Sub(time.Now()) }

	t.Run("ThePlainWaiterAttemptsAtTheRetryOrTheHoldersExpiry", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var p Pace
			attempt(&p, true, false, 300*time.Millisecond)
			if w, at := p.Next(time.Now().Add(time.Second), Hint{}); w != nil || in(at) != 300*time.Millisecond {
				t.Errorf("rule: the holder's expiry comes before the retry: next in %v, want 300ms", in(at))
			}
			if _, at := p.Next(time.Now().Add(100*time.Millisecond), Hint{}); in(at) != 100*time.Millisecond {
				t.Errorf("rule: the retry comes before the expiry: next in %v, want 100ms", in(at))
			}
			time.Sleep(300 * time.Millisecond)
			attempt(&p, true, false, 0)
			if _, at := p.Next(time.Now().Add(time.Second), Hint{}); in(at) != time.Second {
				t.Errorf("rule: an expiry passed before the attempt is not a cue again (no spinning): next in %v, want 1s", in(at))
			}
		})
	})

	t.Run("AQueuedWaiterDropsTheRetriesBehindALiveLockAfterRetriesQueued", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var p Pace
			h := Hint{Wake: wake, Renew: 10 * time.Second}
			attempt(&p, true, false, time.Minute)
			if _, at := p.Next(time.Now().Add(100*time.Millisecond), h); in(at) != 100*time.Millisecond {
				t.Errorf("rule: within RetriesQueued a queued waiter keeps the retries: next in %v", in(at))
			}
			time.Sleep(RetriesQueued + time.Millisecond)
			attempt(&p, true, false, time.Minute)
			if _, at := p.Next(time.Now().Add(100*time.Millisecond), h); in(at) != 10*time.Second {
				t.Errorf("rule: behind a live lock after RetriesQueued, the renewal, not the retry: next in %v, want 10s", in(at))
			}
			attempt(&p, false, false, 0)
			if _, at := p.Next(time.Now().Add(100*time.Millisecond), h); in(at) != 100*time.Millisecond {
				t.Errorf("rule: in an outage (no answer) the retries go on: next in %v", in(at))
			}
			var far Pace
			attempt(&far, true, false, 0)
			if _, at := far.Next(time.Now().Add(100*time.Millisecond), Hint{Wake: wake, Renew: time.Second, FarBack: true}); in(at) != time.Second {
				t.Errorf("rule: far back, the approach, not the retries: next in %v, want 1s", in(at))
			}
		})
	})

	t.Run("AFruitlessWakeUpIsHeededAfterAPause", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var p Pace
			h := Hint{Wake: wake, Renew: 10 * time.Second}
			attempt(&p, true, false, 0)
			if w, _ := p.Next(time.Time{}, h); w == nil {
				t.Fatal("a queued waiter is woken")
			}
			time.Sleep(time.Millisecond)
			attempt(&p, true, false, 0) // woken (before its time), and the key was not its
			w, at := p.Next(time.Time{}, h)
			if w != nil || in(at) != 5*time.Millisecond {
				t.Errorf("rule: after a fruitless wake-up, wake-ups wait 5 ms: wake %v, next in %v", w, in(at))
			}
			time.Sleep(5 * time.Millisecond)
			attempt(&p, true, false, 0) // at its time: not a wake-up
			if w, _ := p.Next(time.Time{}, h); w == nil {
				t.Error("rule: after the pause, wake-ups count again")
			}
			time.Sleep(time.Millisecond)
			attempt(&p, true, false, 0) // woken again, fruitless again
			if _, at := p.Next(time.Time{}, h); in(at) != 10*time.Millisecond {
				t.Errorf("rule: the pause doubles with each fruitless wake-up: next in %v, want 10ms", in(at))
			}
		})
	})

	t.Run("PollingDoublesToPollMaxAndSlowsWhileTheHolderStays", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var p Pace
			h := Hint{Renew: time.Hour, Poll: true}
			expiry := time.Now().Add(time.Hour)
			var gaps []time.Duration
			for range 40 {
				attempt(&p, true, false, expiry.Sub(time.Now()))
				_, at := p.Next(time.Time{}, h)
				gaps = append(gaps, in(at))
				time.Sleep(in(at))
			}
			if gaps[0] != PollMin || gaps[1] != 2*PollMin || gaps[3] != PollMax {
				t.Errorf("rule: polling starts at PollMin and doubles to PollMax: %v", gaps[:4])
			}
			if last := gaps[len(gaps)-1]; last <= PollMax || last > PollStall {
				t.Errorf("rule: while one holder stays, polling slows past PollMax, up to PollStall: last gap %v", last)
			}
			attempt(&p, true, false, time.Minute) // another holder
			if _, at := p.Next(time.Time{}, h); in(at) > PollMax {
				t.Errorf("rule: a hand-off resets the polling: next in %v", in(at))
			}
		})
	})

	t.Run("AnOutageFollowsTheRetryScheduleAlone", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var p Pace
			h := Hint{Wake: wake, Renew: 10 * time.Millisecond, Poll: true} // not listening: the attempt failed
			attempt(&p, true, false, 50*time.Millisecond)
			if _, at := p.Next(time.Now().Add(time.Second), h); in(at) != PollMin {
				t.Fatalf("answered, not listening: polls at PollMin, next in %v", in(at))
			}
			// Count the attempts of a 3 s outage with the retry schedule
			// 100 ms doubling to 1 s: 100+200+400+800+1000 = 2.5 s: 6.
			start, delay, attempts := time.Now(), 100*time.Millisecond, 0
			retry := start.Add(delay)
			for time.Since(start) < 3*time.Second {
				attempt(&p, false, false, 0)
				attempts++
				if !time.Now().Before(retry) {
					delay = min(2*delay, time.Second)
					retry = time.Now().Add(delay)
				}
				_, at := p.Next(retry, h)
				if at.IsZero() {
					t.Fatal("an outage with a retry schedule: no next attempt")
				}
				time.Sleep(in(at))
			}
			if attempts > 7 {
				t.Errorf("rule: in an outage the retry schedule alone paces the attempts: %d in 3 s, want at most 7", attempts)
			}
			attempt(&p, true, false, 0)
			if _, at := p.Next(time.Now().Add(time.Second), h); in(at) != PollMin {
				t.Errorf("rule: once the server answers, polling starts again at PollMin: next in %v", in(at))
			}
		})
	})
}
