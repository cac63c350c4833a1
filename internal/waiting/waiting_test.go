package waiting

import (
	"context"
	"errors"
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
	in     chan string
	fail   chan error
}

func (c *fakeConn) Wait(ctx context.Context) (string, error) {
	select {
	case p := <-c.in:
		return p, nil
	case err := <-c.fail:
		return "", err
	case <-ctx.Done():
		return "", ctx.Err()
	}
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
			c := &fakeConn{in: make(chan string, 16), fail: make(chan error, 1)}
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
				c.in <- payload
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
		w.conn().in <- Payload("B")
		if signalled(a) || !signalled(b) {
			t.Error("rule: a notification wakes only the waiter it names")
		}
		w.h.Wake(Payload("A"))
		if !signalled(a) || signalled(b) {
			t.Error("rule: a local hand-off wakes only the waiter it names")
		}
	})
}

func TestWatcherWakesOnEveryNotification(t *testing.T) {
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
		w.conn().in <- Payload("A")
		if !signalled(a) || !signalled(o) {
			t.Error("rule: a notification wakes the waiter it names and every watcher")
		}
		w.conn().in <- Payload("someone else's waiter")
		if signalled(a) || !signalled(o) {
			t.Error("rule: a notification naming no waiter of this process still wakes the watchers (a hand-off elsewhere)")
		}
		o.Close()
		w.conn().in <- Payload("B")
		synctest.Wait()
		w.h.mu.Lock()
		n, watchers := len(w.h.subs), w.h.watchers
		w.h.mu.Unlock()
		if signalled(o) || n != 1 || watchers != 0 {
			t.Errorf("rule: a closed watcher is gone (signalled again: %v; %d subs, %d watchers left)", signalled(o), n, watchers)
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
			w.conn().in <- Payload(strings.Repeat("x", i%50))
			if i%16 == 15 {
				synctest.Wait()
			}
		}
		if signalled(a) {
			t.Error("rule: a payload that names no waiter wakes nobody")
		}
		w.h.mu.Lock()
		n, c := len(w.h.subs), len(w.h.chans)
		w.h.mu.Unlock()
		if n != 1 || c != 1 {
			t.Errorf("rule: forged notifications add no state; %d waiters, %d channels known", n, c)
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
		w.h.chans["chan1"], w.h.chans["chan2"] = &channel{refs: 1}, &channel{refs: 1}
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
