package syncguard

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/DATA-DOG/go-sqlmock"

	"github.com/syncguard/syncguard-go/internal/rules"
	"github.com/syncguard/syncguard-go/internal/waiting"
)

// A waiter's attempts are spaced by its place: near the head it renews at
// two thirds of its window; further back its row lives twice as long and it
// attempts again when three quarters of the time the queue would take, at
// the pace it last saw it move, to bring it within listenRank has passed;
// doubling its gap before it saw the queue move and while one holder keeps
// the key (up to the time the queue would take at that pace to make it
// first), not while the key is free (a head that has not come yet).
func TestWaiterSpacingByRank(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, _ := newMock(t, &Config{})
		q := b.Queue("k", "", false).(*queueWaiter).q
		q.join(1000)
		defer q.Close()
		w := defaultWaitWindow
		step := func(rank, fence int64, after time.Duration) {
			time.Sleep(after)
			q.contended(rank, fence, time.Now(), 0)
		}
		check := func(what string, window, next time.Duration) {
			t.Helper()
			if got := q.window(); got != window {
				t.Errorf("%s: window %v, want %v", what, got, window)
			}
			if got := q.next(); got != next {
				t.Errorf("%s: next attempt after %v, want %v", what, got, next)
			}
		}
		step(20, 5, 0)
		check("rule: far back, first sight: the row lives twice as long, the next look at once", 2*w, approachMin)
		step(20, 5, 400*time.Millisecond)
		check("rule: far back, the queue stood still: the gap doubles with the wait", 2*w, 400*time.Millisecond)
		step(12, 13, 400*time.Millisecond)
		// 8 places in 400 ms: 9 more to listenRank take 450 ms; three quarters of it.
		check("rule: far back, moving: attempt three quarters of the way to listenRank at the queue's pace", 2*w, 337500*time.Microsecond)
		step(12, 13, 10*time.Hour)
		// 11 places to the head at 50 ms each: the holder may let go at any moment.
		check("rule: however long one holder keeps the key, far back looks again before the queue could make it first at its pace", 2*w, 550*time.Millisecond)
		step(12, 0, time.Second)
		check("rule: a free key whose head has not come: the last pace, no doubling", 2*w, 337500*time.Microsecond)
		step(10, 15, time.Second)
		// 2 places in 1 s: the queue slowed, and so does the approach (7 to go at 500 ms, three quarters).
		check("rule: the pace is the last one seen, not the fastest", 2*w, 2625*time.Millisecond)
		step(listenRank, 16, time.Second)
		check("rule: within listenRank of the head: the base window, renewed after two thirds of it", w, 2*w/3)
		if h := (&queueWaiter{q: q}).hint(); h.Wake == nil || h.Renew != 2*w/3 || !h.Poll || h.FarBack {
			t.Errorf("rule: near the head, before its channel is listened on, the waiter polls; hint %+v", h)
		}
	})
}

// Deeper than rankCap the rank does not move, but the holder's fence
// does: the pace is the hand-offs seen.
func TestWaiterSpacingBeyondTheRankCap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, _ := newMock(t, &Config{})
		q := b.Queue("k", "", false).(*queueWaiter).q
		q.join(1000)
		defer q.Close()
		q.contended(rankCap, 100, time.Now(), 0)
		time.Sleep(time.Second)
		q.contended(rankCap, 110, time.Now(), 0)
		// 10 hand-offs in 1 s; at least rankCap-listenRank to go: three quarters of it.
		if got, want := q.next(), time.Second*time.Duration(rankCap-listenRank)*3/40; got != want {
			t.Errorf("rule: beyond rankCap the queue's pace is its hand-offs: next attempt after %v, want %v", got, want)
		}
	})
}

// A grant notification hands the waiter the key without a statement,
// with a lease that counts from a lower bound of the lock's start: the
// last answered attempt's send time, moved back by how much earlier than
// that attempt's statement the release ran (server times).
func TestGrantedCountsFromALowerBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, _ := newMock(t, &Config{})
		grant := func(q *queueState, fence string, nowMs, ttlMs int64) {
			fields := fmt.Sprintf("%s:%d:%d", fence, nowMs, ttlMs)
			sum := sha256.Sum256([]byte(q.LockID + ":" + fields))
			b.shared.waker.Wake(waiting.Payload(q.LockID) + ":" + fields + ":" + hex.EncodeToString(sum[:16]))
		}
		for _, tc := range []struct {
			name         string
			release      int64         // the release's server time; the attempt's is 10,000
			sinceAttempt time.Duration // from the attempt's send to the grant's use
			ttl          int64         // the grant's
			ok           bool
			age          time.Duration
		}{
			{"rule: a release after the attempt: the lock counts from the attempt's send", 10_050, 100 * time.Millisecond, 1000, true, 100 * time.Millisecond},
			{"rule: a release that ran 300 ms before the attempt's statement: 300 ms earlier still", 9_700, 100 * time.Millisecond, 1000, true, 400 * time.Millisecond},
			{"rule: another TTL than the waiter asked for: not taken", 10_050, 0, 2000, false, 0},
			{"rule: less than half the TTL left by the bound: not taken (an attempt reads the row)", 10_050, 600 * time.Millisecond, 1000, false, 0},
		} {
			q := b.Queue("k", "", false).(*queueWaiter).q
			q.join(1000)
			if _, ok := q.granted(1000); ok {
				t.Errorf("rule: no grant before an answered attempt")
			}
			q.contended(1, 0, time.Now(), 10_000)
			time.Sleep(tc.sinceAttempt)
			grant(q, "000000000000007", tc.release, tc.ttl)
			res, ok := q.granted(1000)
			switch {
			case ok != tc.ok:
				t.Errorf("%s: taken %v", tc.name, ok)
			case ok && (res.HandedOver != tc.age || res.Fence != "000000000000007" || !res.ExpiresAt.Equal(msToTime(tc.release+tc.ttl)) || res.LockID != q.LockID):
				t.Errorf("%s: %+v, want age %v", tc.name, res, tc.age)
			}
			q.Close()
		}

		// A grant that came before an attempt that did not find the key
		// handed over is of a lock gone meanwhile (revoked): dropped.
		q := b.Queue("k", "", false).(*queueWaiter).q
		q.join(1000)
		defer q.Close()
		q.contended(1, 0, time.Now(), 10_000)
		grant(q, "000000000000007", 10_050, 1000)
		time.Sleep(time.Millisecond)
		q.contended(1, 0, time.Now(), 10_060)
		if _, ok := q.granted(1000); ok {
			t.Error("rule: an answered attempt sent after a grant came, which did not find the key handed over, drops that grant")
		}
	})
}

// A 42703 counts as a waiters table of an older version only when it names
// the "near" column: another undefined column is a plain error.
func TestNearColumnError(t *testing.T) {
	for msg, want := range map[string]bool{
		`ERROR: column w.near does not exist (SQLSTATE 42703)`:                     true,
		`pq: column "near" of relation "app_locks_waiters" does not exist`:         true,
		`ERROR: column w.nearby does not exist (SQLSTATE 42703)`:                   false,
		`ERROR: column "linear_near_x" does not exist (SQLSTATE 42703)`:            false,
		`ERROR: column "notified" of relation "near_locks_waiters" does not exist`: false,
	} {
		if got := nearColumnRE.MatchString(msg); got != want {
			t.Errorf("rule: only an error naming the near column is an older waiters table: %q: %v, want %v", msg, got, want)
		}
	}
}

// TestFirstWaiterConfirmsItsFirstAttempt: a waiter whose first attempt
// found a live lock and no waiter ahead attempts again 5 ms on, doubling,
// five times while the same holder holds the key (a release whose
// statement started before that attempt committed did not see its row and
// left the key free without a hint: conformance's
// Waiting/NoLostWakeupWhenReleaseRacesWaiter); a waiter with one ahead,
// or whose first attempt found no live lock, does not.
func TestFirstWaiterConfirmsItsFirstAttempt(t *testing.T) {
	b, mock := newMock(t, nil)
	fence, _ := rules.FormatFence(7)
	held := func(ahead int64) *sqlmock.Rows {
		now := time.Now().UnixMilli()
		return sqlmock.NewRows([]string{"a", "b", "c", "d", "e", "f", "g", "o", "h"}).
			AddRow("holder", now+60000, now, fence, false, now, false, false, ahead)
	}
	renew := b.shared.waitCfg.window * 2 / 3
	attempt := func(w waiter, rows *sqlmock.Rows) time.Duration {
		t.Helper()
		mock.ExpectQuery("a AS MATERIALIZED").WillReturnRows(rows)
		if r, err := w.Attempt(context.Background(), time.Second); err != nil || r.OK {
			t.Fatalf("attempt: %+v, %v; want locked", r, err)
		}
		return w.(*queueWaiter).hint().Renew
	}
	w := b.Queue("k", "", false)
	for i, want := range []time.Duration{5, 10, 20, 40, 80} {
		if got := attempt(w, held(0)); got != want*time.Millisecond {
			t.Fatalf("rule: the first waiter confirms its first attempt 5 ms on, doubling; attempt %d: next in %v, want %v", i+1, got, want*time.Millisecond)
		}
	}
	if got := attempt(w, held(0)); got != renew {
		t.Errorf("after five confirmations the waiter renews (%v); got %v", renew, got)
	}
	if got := attempt(b.Queue("k", "", false), held(1)); got != renew {
		t.Errorf("a waiter with one ahead needs no confirmation: next in %v, want %v", got, renew)
	}
	if err := mock.ExpectationsWereMet(); err != nil {
		t.Fatal(err)
	}
}

// TracePlace (the benchmark's -trace) reports the place the last attempt
// saw: nothing before the waiter joins its queue, then the rank and the
// holder's fence of the last contended attempt, and that its key's channel
// is not listened on while the waiter polls.
func TestTracePlace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, _ := newMock(t, &Config{})
		w := b.Queue("k", "", false).(*queueWaiter)
		if rank, fence, listened := w.TracePlace(); rank != 0 || fence != 0 || listened {
			t.Errorf("rule: a waiter that has not attempted has no place: %d %d %v", rank, fence, listened)
		}
		w.q.join(1000)
		defer w.q.Close()
		w.q.contended(3, 7, time.Now(), 0)
		w.q.contended(2, 8, time.Now(), 0)
		rank, fence, listened := w.TracePlace()
		if rank != 2 || fence != 8 {
			t.Errorf("rule: the place is the last attempt's: rank %d fence %d, want 2 8", rank, fence)
		}
		if listened {
			t.Errorf("rule: listened says a grant reaches the waiter; no channel is listened on here (hint %+v)", w.hint())
		}
	})
}
