package waiting

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/syncguard/syncguard-go/driver"
)

// fakeConn is a LISTEN connection whose notifications the test sends.
type fakeConn struct {
	mu     sync.Mutex
	execs  []string
	closed bool
	in     chan driver.Notification
	fail   chan error
}

func (c *fakeConn) Wait(ctx context.Context) (driver.Notification, error) {
	select {
	case n := <-c.in:
		return n, nil
	case err := <-c.fail:
		return driver.Notification{}, err
	case <-ctx.Done():
		return driver.Notification{}, ctx.Err()
	}
}

// send delivers a notification on channel to the connection.
func (c *fakeConn) send(channel, payload string) {
	c.in <- driver.Notification{Channel: channel, Payload: payload}
}
func (c *fakeConn) Ping(context.Context) error { return nil }
func (c *fakeConn) Exec(_ context.Context, sql string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if strings.Contains(sql, ";") {
		return errors.New("fake: one statement per Exec (lib/pq's ListenerConn closes on a second CommandComplete)")
	}
	c.execs = append(c.execs, sql)
	return nil
}
func (c *fakeConn) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	return nil
}
func (c *fakeConn) log() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return strings.Join(c.execs, "|")
}

// world is a hub on fake connections; the probe comes back unless lost.
type world struct {
	h         *Hub
	conns     []*fakeConn
	mu        sync.Mutex
	lostProbe bool
	fallbacks []Status
}

func newWorld(t *testing.T) *world {
	w := &world{}
	w.h = New(Config{
		Open: func(ctx context.Context, channel string) (driver.NotifyConn, error) {
			c := &fakeConn{in: make(chan driver.Notification, 16), fail: make(chan error, 1)}
			w.mu.Lock()
			w.conns = append(w.conns, c)
			w.mu.Unlock()
			return c, nil
		},
		Notify: func(ctx context.Context, channel, payload string) error {
			w.mu.Lock()
			c, lost := w.conns[len(w.conns)-1], w.lostProbe
			w.mu.Unlock()
			if !lost {
				c.send(channel, payload)
			}
			return nil
		},
		OnFallback: func(st Status) { w.fallbacks = append(w.fallbacks, st) },
	})
	t.Cleanup(w.h.Close)
	return w
}

func (w *world) conn() *fakeConn {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.conns[len(w.conns)-1]
}

func signalled(s *Sub) bool {
	synctest.Wait()
	select {
	case <-s.C:
		return true
	default:
		return false
	}
}

func TestListenThenWakeOnlyTheNamedWaiter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t)
		a, b := w.h.Expect(Payload("A")), w.h.Expect(Payload("B"))
		a.Listen("chan1")
		b.Listen("chan1")
		if !signalled(a) || !signalled(b) {
			t.Fatal("rule: a waiter is signalled once its channel's LISTEN took effect (a hand-off may have come before)")
		}
		if got := w.conn().log(); got != `LISTEN "chan1"` {
			t.Errorf("rule: one LISTEN per channel, however many waiters; ran %q", got)
		}
		if !a.Listening() {
			t.Error("rule: Listening is true once the channel is listened on and the probe came back")
		}
		w.conn().send("chan1", Payload("B"))
		if signalled(a) || !signalled(b) {
			t.Error("rule: a notification wakes only the waiter it names")
		}
		w.h.Wake(Payload("A"))
		if !signalled(a) || signalled(b) {
			t.Error("rule: a local hand-off wakes only the waiter it names")
		}
	})
}

func TestWatcherWakesOnItsChannelOnly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t)
		a := w.h.Expect(Payload("A"))
		a.Listen("chan1")
		o := w.h.Watch("chan2")
		if !signalled(a) || !signalled(o) {
			t.Fatal("rule: a watcher is signalled once its channel's LISTEN took effect, as a waiter is")
		}
		if got := w.conn().log(); got != `LISTEN "chan1"|LISTEN "chan2"` && got != `LISTEN "chan2"|LISTEN "chan1"` {
			t.Errorf("rule: Watch listens on the watched channel; ran %q", got)
		}
		w.conn().send("chan1", Payload("A"))
		if !signalled(a) || signalled(o) {
			t.Error("rule: a notification on a waiter's channel wakes the waiter it names, not the watchers of another channel")
		}
		w.conn().send("chan2", Payload("someone else's waiter"))
		if signalled(a) || !signalled(o) {
			t.Error("rule: any notification on the watched channel wakes its watchers (a hand-off to a waiter elsewhere), and no waiter it does not name")
		}
		o.Close()
		w.conn().send("chan2", Payload("B"))
		synctest.Wait()
		w.h.mu.Lock()
		n, members := len(w.h.subs), len(w.h.chans["chan2"].members)
		w.h.mu.Unlock()
		if signalled(o) || n != 1 || members != 0 {
			t.Errorf("rule: a closed watcher is gone (signalled again: %v; %d waiters, %d members of its channel left)", signalled(o), n, members)
		}
	})
}

// Anyone can NOTIFY on any channel: a payload that names a waiter of one
// key, sent on another key's channel, wakes neither that waiter nor the
// other key's waiters; the other key's watchers only read it again.
func TestAnotherKeysChannelWakesNoWaiterOrWatcherOfThisKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t)
		a := w.h.Expect(Payload("A"))
		a.Listen("this")
		o := w.h.Watch("this")
		b := w.h.Expect(Payload("B"))
		b.Listen("other")
		other := w.h.Watch("other")
		for _, s := range []*Sub{a, o, b, other} {
			if !signalled(s) {
				t.Fatal("setup: each is signalled once its channel is listened on")
			}
		}
		w.conn().send("other", Payload("A"))
		if signalled(a) || signalled(o) {
			t.Error("rule: a notification on another key's channel, even one naming this key's waiter, signals no waiter or watcher of this key")
		}
		if signalled(b) || !signalled(other) {
			t.Error("rule: it signals the other key's watchers only, not its waiters that it does not name")
		}
		w.conn().send("this", Payload("A"))
		if !signalled(a) || !signalled(o) || signalled(b) || signalled(other) {
			t.Error("rule: a notification on this key's channel signals this key's named waiter and watchers only")
		}
	})
}

// A hand-off may name a waiter between its first attempt and its Listen:
// it is kept, by channel, and signals the waiter at its Listen of that
// channel only; a flood of such notifications keeps a bounded list.
func TestNotificationBeforeListenIsKeptForItsChannel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t)
		other := w.h.Expect(Payload("other"))
		other.Listen("chan1") // chan1 is listened on: a's first attempt may be handed the key
		signalled(other)
		a, b, c := w.h.Expect(Payload("A")), w.h.Expect(Payload("B")), w.h.Expect(Payload("C"))
		w.conn().send("chan1", Payload("A"))
		w.conn().send("chan2", Payload("B"))
		if signalled(a) || signalled(b) {
			t.Fatal("rule: a waiter that has not named its channel is not signalled yet")
		}
		a.Listen("chan1")
		if !signalled(a) {
			t.Error("rule: a notification that named the waiter on its channel before its Listen signals it at its Listen")
		}
		b.Listen("chan1")
		if signalled(b) {
			t.Error("rule: a notification that named the waiter on another channel does not signal it at its Listen")
		}
		for i := range 1000 {
			w.conn().send(fmt.Sprint("forged", i), Payload("C"))
			if i%16 == 15 {
				synctest.Wait()
			}
		}
		synctest.Wait()
		w.h.mu.Lock()
		kept := len(c.early)
		w.h.mu.Unlock()
		if kept > maxEarly {
			t.Errorf("rule: what a waiter keeps before its Listen is bounded; %d channels kept", kept)
		}
		c.Listen("chan1")
		if !signalled(c) {
			t.Error("rule: past the bound, the waiter is signalled at its Listen (one attempt: a hint may have been dropped)")
		}
	})
}

func TestForgedPayloadsCostNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t)
		a := w.h.Expect(Payload("A"))
		a.Listen("chan1")
		signalled(a)
		for i := range 10000 {
			channel, payload := "chan1", Payload(strings.Repeat("x", i%50))
			switch i % 3 {
			case 1:
				channel = fmt.Sprint("chan", i) // a channel nobody here listens on
			case 2:
				payload = Payload("A") // naming the waiter, on a channel not its own
				channel = fmt.Sprint("chan", i)
			}
			w.conn().send(channel, payload)
			if i%16 == 15 {
				synctest.Wait()
			}
		}
		if signalled(a) {
			t.Error("rule: a payload that names no waiter of its channel wakes nobody")
		}
		w.h.mu.Lock()
		n, c, early := len(w.h.subs), len(w.h.chans), len(a.early)
		w.h.mu.Unlock()
		if n != 1 || c != 1 || early != 0 {
			t.Errorf("rule: forged notifications add no state; %d waiters, %d channels known, %d kept for the waiter", n, c, early)
		}
	})
}

func TestUnlistenAfterLingerAndCloseWhenIdle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t)
		a := w.h.Expect(Payload("A"))
		a.Listen("chan1")
		signalled(a)
		a.Close()
		time.Sleep(11 * time.Second) // Linger 10 s
		synctest.Wait()
		if got := w.conn().log(); got != `LISTEN "chan1"|UNLISTEN "chan1"` {
			t.Errorf("rule: a channel nobody waits on is unlistened after Linger; ran %q", got)
		}
		time.Sleep(30 * time.Second) // Idle
		synctest.Wait()
		w.conn().mu.Lock()
		closed := w.conn().closed
		w.conn().mu.Unlock()
		if !closed {
			t.Error("rule: the connection closes after Idle without waiters")
		}
	})
}

func TestProbeLostFallsBackOnceAndSaysWhy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t)
		w.lostProbe = true
		a := w.h.Expect(Payload("A"))
		a.Listen("chan1")
		st := w.h.Status(t.Context())
		if st.Active || st.Kind != KindProbeLost || !strings.Contains(st.Reason, "pooler") {
			t.Fatalf("rule: a probe that does not come back means polling, said with its kind; got %+v", st)
		}
		if !signalled(a) {
			t.Error("rule: waiters are signalled when waiting falls back to polling")
		}
		if len(w.fallbacks) != 1 {
			t.Errorf("rule: the fallback is reported once; %d reports", len(w.fallbacks))
		}
		// No reopen before RetryMin.
		b := w.h.Expect(Payload("B"))
		b.Listen("chan2")
		synctest.Wait()
		if len(w.conns) != 1 {
			t.Errorf("rule: no new connection before the retry delay; %d opened", len(w.conns))
		}
	})
}

func TestConnectionFailureSignalsWaitersAndClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t)
		a := w.h.Expect(Payload("A"))
		a.Listen("chan1")
		signalled(a)
		w.conn().fail <- errors.New("connection reset")
		if !signalled(a) {
			t.Error("rule: a failed connection signals its waiters (a hint may be lost: attempt)")
		}
		if st := w.h.Status(context.Background()); st.Active || st.Kind != KindFailed {
			t.Errorf("rule: a failed connection is reported; got %+v", st)
		}
		w.h.Close()
		time.Sleep(time.Hour)
		b := w.h.Expect(Payload("B"))
		b.Listen("chan2")
		synctest.Wait()
		if len(w.conns) != 1 {
			t.Errorf("rule: a closed hub never opens a connection again; %d opened", len(w.conns))
		}
	})
}

// Two channels wanted at once are LISTENed with one statement each.
func TestTwoChannelsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t)
		a, b := w.h.Expect(Payload("A")), w.h.Expect(Payload("B"))
		w.h.mu.Lock() // both wanted before the goroutine looks
		a.channel, b.channel = "chan1", "chan2"
		w.h.chans["chan1"] = &channel{members: map[*Sub]struct{}{a: {}}}
		w.h.chans["chan2"] = &channel{members: map[*Sub]struct{}{b: {}}}
		w.h.startLocked()
		w.h.mu.Unlock()
		if !signalled(a) || !signalled(b) {
			t.Fatal("rule: both waiters are signalled once their channels are listened on")
		}
		if st := w.h.Status(t.Context()); !st.Active {
			t.Errorf("rule: LISTENing on two channels at once keeps the connection; %+v", st)
		}
		if got := w.conn().log(); got != `LISTEN "chan1"|LISTEN "chan2"` {
			t.Errorf("ran %q", got)
		}
	})
}

// After a failure the connection is opened again, after the backoff, while
// someone still waits or watches: nobody is left polling for good, and
// each is signalled when its channel is listened on again.
func TestReopensAfterAFailureWhileWatched(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t)
		o := w.h.Watch("chan1")
		a := w.h.Expect(Payload("A"))
		a.Listen("chan2")
		signalled(o)
		signalled(a)
		w.conn().fail <- errors.New("connection reset")
		if !signalled(o) || !signalled(a) {
			t.Fatal("rule: a failed connection signals its watchers and waiters")
		}
		time.Sleep(5 * time.Second) // RetryMin
		if !signalled(o) || !signalled(a) {
			t.Error("rule: after the backoff the channels are listened on again, and their watchers and waiters signalled")
		}
		if n := len(w.conns); n != 2 {
			t.Fatalf("rule: one new connection after the backoff; %d opened", n)
		}
		if got := w.conn().log(); got != `LISTEN "chan1"|LISTEN "chan2"` {
			t.Errorf("rule: the new connection listens on the wanted channels; ran %q", got)
		}
		if !a.Listening() {
			t.Error("rule: the waiter's channel is listened on again")
		}
		w.conn().send("chan1", "anything")
		if !signalled(o) {
			t.Error("rule: the new connection's notifications reach the watcher")
		}
		o.Close()
		a.Close()
		w.conn().fail <- errors.New("connection reset")
		synctest.Wait()
		time.Sleep(time.Hour)
		if n := len(w.conns); n != 2 {
			t.Errorf("rule: nothing reopens when nobody waits or watches; %d opened", n)
		}
	})
}
