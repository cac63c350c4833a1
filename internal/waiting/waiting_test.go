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

// log is what the connection ran after the probe's UNLISTEN (which
// probeUnlistened checks).
func (c *fakeConn) log() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	execs := c.execs
	if len(execs) > 0 && strings.HasPrefix(execs[0], `UNLISTEN "syncguard:probe:`) {
		execs = execs[1:]
	}
	return strings.Join(execs, "|")
}

func (c *fakeConn) probeUnlistened() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.execs) > 0 && strings.HasPrefix(c.execs[0], `UNLISTEN "syncguard:probe:`)
}

// world is a waker on fake connections; the probe comes back unless lost.
type world struct {
	waker     *Waker
	conns     []*fakeConn
	mu        sync.Mutex
	lostProbe bool
	fallbacks []Status
}

func newWorld(t *testing.T) *world {
	w := &world{}
	w.waker = New(Config{
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
	t.Cleanup(w.waker.Close)
	return w
}

func (w *world) conn() *fakeConn {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.conns[len(w.conns)-1]
}

func signalled(u *Wakeup) bool {
	synctest.Wait()
	select {
	case <-u.C:
		return true
	default:
		return false
	}
}

func TestListenThenWakeOnlyTheNamedWaiter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t)
		a, b := w.waker.Expect("chan1", Payload("A")), w.waker.Expect("chan1", Payload("B"))
		a.Listen()
		b.Listen()
		// b is signalled too unless the LISTEN took effect before b's Listen
		// (the listening goroutine runs beside this one): then no hand-off
		// to b was missed, its payload being registered since Expect.
		if !signalled(a) {
			t.Fatal("rule: a waiter is signalled once its channel's LISTEN took effect (a hand-off may have come before)")
		}
		signalled(b)
		if got := w.conn().log(); got != `LISTEN "chan1"` {
			t.Errorf("rule: one LISTEN per channel, however many waiters; ran %q", got)
		}
		if !w.conn().probeUnlistened() {
			t.Error("rule: the probe channel is unlistened once the probe came back (a listening session costs every notifying commit)")
		}
		if !a.ChannelListened() {
			t.Error("rule: ChannelListened is true once the channel is listened on and the probe came back")
		}
		w.conn().send("chan1", Payload("B"))
		if signalled(a) || !signalled(b) {
			t.Error("rule: a notification wakes only the waiter it names")
		}
		w.waker.Wake(Payload("A"))
		if !signalled(a) || signalled(b) {
			t.Error("rule: a local hand-off wakes only the waiter it names")
		}
	})
}

func TestWatcherWakesOnItsChannelOnly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t)
		a := w.waker.Expect("chan1", Payload("A"))
		a.Listen()
		o := w.waker.Watch("chan2")
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
		w.waker.mu.Lock()
		n, members := len(w.waker.waiters), len(w.waker.chans["chan2"].members)
		w.waker.mu.Unlock()
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
		a := w.waker.Expect("this", Payload("A"))
		a.Listen()
		o := w.waker.Watch("this")
		b := w.waker.Expect("other", Payload("B"))
		b.Listen()
		other := w.waker.Watch("other")
		// Each is signalled by its channel's LISTEN taking effect, unless it
		// joined after that (the listening goroutine runs beside this one):
		// drain those signals.
		synctest.Wait()
		if !w.waker.ChannelListened("this") || !w.waker.ChannelListened("other") {
			t.Fatalf("setup: both channels are listened on (log %q)", w.conn().log())
		}
		for _, u := range []*Wakeup{a, o, b, other} {
			signalled(u)
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

// A waiter's first attempt may be handed the key before its Listen (its
// channel was listened on for another waiter): a notification naming it
// on its channel wakes it then too, one on another channel does not.
func TestWaiterIsWokenOnItsChannelBeforeItsListen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t)
		other := w.waker.Expect("chan1", Payload("other"))
		other.Listen()
		signalled(other)
		a := w.waker.Expect("chan1", Payload("A"))
		if !w.waker.ChannelListened("chan1") || !a.ChannelListened() {
			t.Fatal("setup: the waiter's channel is listened on (for another waiter) before its Listen")
		}
		w.conn().send("chan2", Payload("A"))
		if signalled(a) {
			t.Error("rule: a notification naming the waiter on another channel does not wake it")
		}
		w.conn().send("chan1", Payload("A"))
		if !signalled(a) {
			t.Error("rule: a notification naming the waiter on its channel wakes it, before its Listen too")
		}
		a.Listen()
		if signalled(a) || signalled(other) {
			t.Error("rule: a Listen of a channel already listened on signals nobody")
		}
	})
}

func TestForgedPayloadsCostNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t)
		a := w.waker.Expect("chan1", Payload("A"))
		a.Listen()
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
		w.waker.mu.Lock()
		n, c := len(w.waker.waiters), len(w.waker.chans)
		w.waker.mu.Unlock()
		if n != 1 || c != 1 {
			t.Errorf("rule: forged notifications add no state; %d waiters, %d channels known", n, c)
		}
	})
}

func TestUnlistenAfterLingerAndCloseWhenIdle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t)
		a := w.waker.Expect("chan1", Payload("A"))
		a.Listen()
		signalled(a)
		a.Close()
		time.Sleep(11 * time.Second) // Linger 250 ms
		synctest.Wait()
		if got := w.conn().log(); got != `LISTEN "chan1"|UNLISTEN "chan1"` {
			t.Errorf("rule: a channel nobody waits on is unlistened after Linger; ran %q", got)
		}
		isClosed := func() bool {
			w.conn().mu.Lock()
			defer w.conn().mu.Unlock()
			return w.conn().closed
		}
		// Listening on nothing, the connection stays open for the next
		// wait: a LISTEN, not a new connection and its probe.
		b := w.waker.Expect("chan2", Payload("B"))
		b.Listen()
		if !signalled(b) || isClosed() || len(w.conns) != 1 || w.conn().log() != `LISTEN "chan1"|UNLISTEN "chan1"|LISTEN "chan2"` {
			t.Errorf("rule: an unlistened connection is reused within Idle; %d connections, ran %q", len(w.conns), w.conn().log())
		}
		b.Close()
		time.Sleep(31 * time.Second) // Idle 30 s after the last channel was dropped
		synctest.Wait()
		if !isClosed() {
			t.Error("rule: the connection closes after Idle without waiters")
		}
	})
}

func TestProbeLostFallsBackOnceAndSaysWhy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t)
		w.lostProbe = true
		a := w.waker.Expect("chan1", Payload("A"))
		a.Listen()
		st := w.waker.Status(t.Context())
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
		b := w.waker.Expect("chan2", Payload("B"))
		b.Listen()
		synctest.Wait()
		if len(w.conns) != 1 {
			t.Errorf("rule: no new connection before the retry delay; %d opened", len(w.conns))
		}
	})
}

func TestConnectionFailureSignalsWaitersAndClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t)
		a := w.waker.Expect("chan1", Payload("A"))
		a.Listen()
		signalled(a)
		w.conn().fail <- errors.New("connection reset")
		if !signalled(a) {
			t.Error("rule: a failed connection signals its waiters (a hint may be lost: attempt)")
		}
		if st := w.waker.Status(context.Background()); st.Active || st.Kind != KindFailed {
			t.Errorf("rule: a failed connection is reported; got %+v", st)
		}
		w.waker.Close()
		time.Sleep(time.Hour)
		b := w.waker.Expect("chan2", Payload("B"))
		b.Listen()
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
		a, b := w.waker.Expect("chan1", Payload("A")), w.waker.Expect("chan2", Payload("B"))
		w.waker.mu.Lock() // both wanted before the goroutine looks
		a.joined, b.joined = true, true
		w.waker.chans["chan1"] = &channel{members: map[*Wakeup]struct{}{a: {}}}
		w.waker.chans["chan2"] = &channel{members: map[*Wakeup]struct{}{b: {}}}
		w.waker.startLocked()
		w.waker.mu.Unlock()
		if !signalled(a) || !signalled(b) {
			t.Fatal("rule: both waiters are signalled once their channels are listened on")
		}
		if st := w.waker.Status(t.Context()); !st.Active {
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
		o := w.waker.Watch("chan1")
		a := w.waker.Expect("chan2", Payload("A"))
		a.Listen()
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
		if !a.ChannelListened() {
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

// With Config.Pool (notifications on a pool of their own), the probe sent
// through the lock pool first says whether a release's commit reaches the
// connection: it does when both reach one database, not when they do not.
func TestPoolReachesFromTheProbe(t *testing.T) {
	for _, same := range []bool{true, false} {
		synctest.Test(t, func(t *testing.T) {
			var conns []*fakeConn
			var mu sync.Mutex
			send := func(channel, payload string) {
				mu.Lock()
				defer mu.Unlock()
				conns[len(conns)-1].send(channel, payload)
			}
			w := New(Config{
				Open: func(ctx context.Context, channel string) (driver.NotifyConn, error) {
					c := &fakeConn{in: make(chan driver.Notification, 16), fail: make(chan error, 1)}
					mu.Lock()
					conns = append(conns, c)
					mu.Unlock()
					return c, nil
				},
				Notify: func(ctx context.Context, channel, payload string) error { send(channel, payload); return nil },
				Pool: func(ctx context.Context, channel, payload string) error {
					if same {
						send(channel, payload)
					}
					return nil
				},
			})
			defer w.Close()
			if st := w.Status(t.Context()); !st.Active || st.PoolReaches != same || w.PoolReaches() != same {
				t.Errorf("same database %v: status %+v, PoolReaches %v; want active, PoolReaches %v", same, st, w.PoolReaches(), same)
			}
		})
	}
}
