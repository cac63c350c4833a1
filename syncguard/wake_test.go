package syncguard

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/syncguard/syncguard-go/driver"
)

// The hub's queue, driven by notifications as PostgreSQL delivers them:
// every hub gets every payload, in one order. These tests need no server:
// a bus stands for the channel, and each hub is one process whose LISTEN
// connection is confirmed. The conformance suite (Waiting) checks the same
// rules end to end.

type nullDialect struct{}

func (nullDialect) Name() string                   { return "null" }
func (nullDialect) Inspect(error) driver.ErrorInfo { return driver.ErrorInfo{} }

// bus delivers each notification to every hub, in the order sent.
type bus struct {
	mu    sync.Mutex
	hubs  []*hub
	clock int64 // the server's clock, for stamped payloads: one tick a stamp
}

func (b *bus) send(ctx context.Context, payload string) { b.deliver(ctx, payload, false) }

// deliver is hub.send on the bus: a stamp is the server's clock.
func (b *bus) deliver(_ context.Context, payload string, stamp bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if stamp {
		b.clock++
		payload += strconv.FormatInt(100+b.clock, 10)
	}
	for _, h := range b.hubs {
		h.dispatch(payload)
	}
}

// process returns a hub on b, as if its LISTEN connection were confirmed.
func (b *bus) process() *hub {
	h := newHub(nil, resolved{table: "t", dialect: nullDialect{}, logger: discardLogger(), releaseTimeout: time.Second}, classifier{})
	h.state = lnOn
	h.send = b.deliver
	b.mu.Lock()
	b.hubs = append(b.hubs, h)
	b.mu.Unlock()
	return h
}

// newcomer returns a hub on b whose LISTEN connection listens but is not
// confirmed yet: it has heard nothing sent before.
func (b *bus) newcomer() *hub {
	h := b.process()
	h.state, h.settled = lnProbing, make(chan struct{})
	return h
}

// wait registers a waiter for kh on h and queues it, as Lock does after a
// failed attempt.
func wait(h *hub, kh string) *waiter {
	w := h.join(kh, h.seqNow(), 0)
	h.prepare(context.Background(), w, time.Minute)
	return w
}

func hasTurn(w *waiter) bool {
	select {
	case <-w.turn:
		return true
	default:
		return false
	}
}

// turns checks which waiters have a turn, consuming them.
func turns(t *testing.T, step string, want map[string]bool, ws map[string]*waiter) {
	t.Helper()
	for name, w := range ws {
		if got := hasTurn(w); got != want[name] {
			t.Errorf("%s: waiter %s has a turn: %v, want %v", step, name, got, want[name])
		}
	}
}

// holdAndRelease plays w acquiring the key (its acquire sends a) and
// releasing it (its process sees the release at once, the others by r).
func holdAndRelease(b *bus, h *hub, w *waiter) {
	kh := w.kq.kh
	h.acquired(w, time.Minute)
	h.leave(w, true)
	b.send(context.Background(), "a "+kh+" "+w.wid+" 1000")
	h.released(kh)
	b.send(context.Background(), "r "+kh)
}

func TestWaitTurnsFollowArrivalAcrossProcesses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var b bus
		A, B := b.process(), b.process()
		kh := wakeKeyHash("k")
		a1 := wait(A, kh)
		b1 := wait(B, kh)
		a2 := wait(A, kh)
		ws := map[string]*waiter{"a1": a1, "b1": b1, "a2": a2}
		for _, h := range []*hub{A, B} {
			var got []string
			for _, e := range h.keys[kh].queue {
				got = append(got, e.wid)
			}
			if want := []string{a1.wid, b1.wid, a2.wid}; len(got) != 3 || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
				t.Fatalf("rule: every process keeps the same queue, in the order the waiters announced themselves; got %v, want %v", got, want)
			}
		}
		b.send(context.Background(), "r "+kh)
		turns(t, "first release", map[string]bool{"a1": true}, ws)

		holdAndRelease(&b, A, a1)
		turns(t, "a1's release", map[string]bool{"b1": true}, ws) // not a2, though a2 is in the releasing process

		holdAndRelease(&b, B, b1)
		turns(t, "b1's release", map[string]bool{"a2": true}, ws)
		synctest.Wait()
	})
}

func TestWaitStaggerPassesADeadWaiter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var b bus
		A := b.process()
		kh := wakeKeyHash("k")
		// A waiter whose process died queued first.
		b.send(context.Background(), "q "+kh+" 00000000000000de 600000")
		a1 := wait(A, kh)
		for ep := 1; ep <= missLimit; ep++ {
			b.send(context.Background(), "r "+kh)
			if hasTurn(a1) {
				t.Fatalf("episode %d: rule: a waiter does not get a turn before the waiters queued ahead of it have had theirs", ep)
			}
			time.Sleep(grantStagger - time.Millisecond)
			synctest.Wait()
			if hasTurn(a1) {
				t.Fatalf("episode %d: rule: the waiter ahead has grantStagger (%v) to take its turn; the next got one before", ep, grantStagger)
			}
			time.Sleep(time.Millisecond)
			synctest.Wait()
			if !hasTurn(a1) {
				t.Fatalf("episode %d: rule: a waiter that lets its turn pass holds the queue up by grantStagger only; the next has no turn", ep)
			}
			A.failed(a1, A.attemptSeq(a1), 0) // the key was taken meanwhile
		}
		if n := len(A.keys[kh].queue); n != 1 {
			t.Errorf("rule: a waiter of another process that let %d turns pass is dropped; the queue has %d entries", missLimit, n)
		}
		b.send(context.Background(), "r "+kh)
		if !hasTurn(a1) {
			t.Errorf("rule: once the dead waiter is dropped, the next release gives the next waiter its turn at once")
		}
		synctest.Wait()
	})
}

func TestWaitGiveUpPassesTheTurn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var b bus
		A, B := b.process(), b.process()
		kh := wakeKeyHash("k")
		b1 := wait(B, kh)
		a1 := wait(A, kh)
		b.send(context.Background(), "r "+kh)
		if hasTurn(a1) {
			t.Fatal("rule: the first queued waiter (another process's) has the turn")
		}
		// b1 gives up while it has the turn: its c moves the queue on at
		// once, without waiting for grantStagger.
		B.leave(b1, false)
		synctest.Wait()
		if !hasTurn(a1) {
			t.Error("rule: a queued waiter that gives up during its turn passes it on at once (c)")
		}
		// Within one process: a waiter that leaves with an unused turn
		// hands it to the next.
		a2 := wait(A, kh)
		a3 := wait(A, kh)
		b.send(context.Background(), "r "+kh)
		A.leave(a1, false)
		A.leave(a2, false)
		synctest.Wait()
		if !hasTurn(a3) {
			t.Error("rule: a waiter that leaves with an unused turn hands it to the next")
		}
		synctest.Wait()
	})
}

func TestWaitNoLostWakeup(t *testing.T) {
	var b bus
	A := b.process()
	kh, other := wakeKeyHash("k"), wakeKeyHash("other")

	// A release lands between the caller's failed attempt (which read
	// since) and its join: the waiter gets its turn at once.
	since := A.seqNow()
	A.released(kh)
	if w := A.join(kh, since, 0); !hasTurn(w) {
		t.Error("rule: a release between a failed attempt and the wait wakes the waiter (join sees it)")
	}
	// A release of another key does not.
	since = A.seqNow()
	A.released(other)
	if w := A.join(wakeKeyHash("third"), since, 0); hasTurn(w) {
		t.Error("rule: only a release of the waiter's own key gives it a turn")
	}
	// More releases than remembered: assume one was ours.
	since = A.seqNow()
	for range len(A.recent) + 1 {
		A.released(other)
	}
	if w := A.join(wakeKeyHash("fourth"), since, 0); !hasTurn(w) {
		t.Error("rule: when the releases since the attempt are too many to check, the waiter tries again")
	}
	// A release during an attempt: the failed attempt is followed by
	// another.
	w := wait(A, kh)
	hasTurn(w)
	seq := A.attemptSeq(w)
	A.released(kh)
	hasTurn(w) // the release's own turn: the attempt in flight
	A.failed(w, seq, 0)
	if !hasTurn(w) {
		t.Error("rule: an attempt that fails while a release came in is tried again")
	}
}

func TestWaitPollsOnlyForUnknownHolders(t *testing.T) {
	var b bus
	A, B := b.process(), b.process()
	kh := wakeKeyHash("k")
	a1 := wait(A, kh)
	b1 := wait(B, kh)
	if A.holderAnnounced(a1) {
		t.Error("rule: a holder not seen acquiring is not known to announce its release: retries go on")
	}
	A.acquired(a1, time.Minute) // a1 acquires: B learns it from a1's a
	A.leave(a1, true)
	b.send(context.Background(), "a "+kh+" "+a1.wid+" 1000")
	if !B.holderAnnounced(b1) {
		t.Error("rule: while a holder that announced itself (a) holds the key, the waiters need not retry")
	}
	A.released(kh)
	b.send(context.Background(), "r "+kh)
	if B.holderAnnounced(b1) {
		t.Error("rule: after a release the next holder is unknown until it announces itself")
	}
	B.state = lnOff
	b.send(context.Background(), "a "+kh+" someone 1000")
	if B.holderAnnounced(b1) {
		t.Error("rule: without a confirmed LISTEN connection a waiter always retries")
	}
}

func TestWaitOwnReleaseEchoIsNotCountedTwice(t *testing.T) {
	var b bus
	A, B := b.process(), b.process()
	kh := wakeKeyHash("k")
	a1 := wait(A, kh)
	b1 := wait(B, kh)
	b.send(context.Background(), "r "+kh)
	hasTurn(a1)
	// a1 acquires; then its release's notification (carrying A's token)
	// comes back before Release returns, and released runs after it.
	A.acquired(a1, time.Minute)
	A.leave(a1, true)
	b.send(context.Background(), "a "+kh+" "+a1.wid+" 1000")
	b.send(context.Background(), "r "+kh+" "+A.token)
	A.released(kh)
	if !hasTurn(b1) {
		t.Fatal("rule: a release wakes the next queued waiter in another process")
	}
	// b1 acquires and releases: A's waiter must hear that release, whatever
	// the order A saw its own release's notification in.
	a2 := wait(A, kh)
	B.acquired(b1, time.Minute)
	B.leave(b1, true)
	b.send(context.Background(), "a "+kh+" "+b1.wid+" 1000")
	B.released(kh)
	b.send(context.Background(), "r "+kh+" "+B.token)
	if !hasTurn(a2) {
		t.Error("rule: another process's release is never taken for an echo of this process's own (no lost wake-up)")
	}
}

func TestWaitEchoesOfDepartedWaitersQueueNobody(t *testing.T) {
	var b bus
	A := b.process()
	kh := wakeKeyHash("k")
	// w announces itself, but takes the key and leaves before its own q
	// comes back through the LISTEN connection; its q and a arrive late.
	w := A.join(kh, A.seqNow(), 0)
	w.announced = true
	A.acquired(w, time.Minute)
	A.leave(w, true)
	b.send(context.Background(), "q "+kh+" "+w.wid+" 60000")
	b.send(context.Background(), "a "+kh+" "+w.wid+" 1000")
	if kq := A.keys[kh]; kq != nil && len(kq.queue) > 0 {
		t.Errorf("rule: a late q of a waiter that already left queues nobody; queue has %d entries", len(kq.queue))
	}
	if A.busy(kh) {
		t.Error("rule: a newcomer tries first unless the key is being handed on")
	}
	// During a hand-off a newcomer queues behind the waiters instead.
	w2 := wait(A, kh)
	b.send(context.Background(), "r "+kh)
	if !A.busy(kh) {
		t.Error("rule: while the key is handed on (a release, a waiter's turn), a newcomer queues instead of trying")
	}
	hasTurn(w2)
}

func TestWaitNewcomerLearnsTheQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var b bus
		A, B := b.process(), b.process()
		kh := wakeKeyHash("k")
		a1 := wait(A, kh)
		b1 := wait(B, kh)
		// C starts listening after a1 and b1 queued: it heard neither q.
		C := b.newcomer()
		c1 := C.join(kh, C.seqNow(), 0)
		hasTurn(c1) // the LISTEN connection's start: c1 attempts, finds the key held
		C.failed(c1, C.attemptSeq(c1), 0)
		C.setState(lnOn, "") // the probe came back
		C.askSync()          // after the keys' registration
		C.prepare(context.Background(), c1, time.Minute)
		synctest.Wait() // the sync request's answers
		for name, h := range map[string]*hub{"A": A, "B": B, "C": C} {
			var got []string
			for _, e := range h.keys[kh].queue {
				got = append(got, e.wid)
			}
			if want := []string{a1.wid, b1.wid, c1.wid}; !slices.Equal(got, want) {
				t.Errorf("hub %s: rule: a process that starts listening late learns the places of the waiters queued before (sync), "+
					"and every process keeps the same queue; got %v, want %v", name, got, want)
			}
		}
		ws := map[string]*waiter{"a1": a1, "b1": b1, "c1": c1}
		b.send(context.Background(), "r "+kh)
		turns(t, "first release", map[string]bool{"a1": true}, ws) // not c1: it queued last
		holdAndRelease(&b, A, a1)
		turns(t, "a1's release", map[string]bool{"b1": true}, ws)
		holdAndRelease(&b, B, b1)
		turns(t, "b1's release", map[string]bool{"c1": true}, ws)
		synctest.Wait()
	})
}

func TestWaitPlaceLearnedDuringEpisodeGrantsNoTurnTwice(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var b bus
		C := b.process()
		kh := wakeKeyHash("k")
		c1 := wait(C, kh)
		c2 := wait(C, kh)
		b.send(context.Background(), "r "+kh)
		if !hasTurn(c1) {
			t.Fatal("rule: a release gives the first queued waiter its turn")
		}
		// While c1 attempts, the places of two older waiters of other
		// processes arrive (answers to C's sync request): they go ahead.
		b.send(context.Background(), "q "+kh+" 00000000000000a1 60000 1")
		b.send(context.Background(), "q "+kh+" 00000000000000a2 60000 2")
		got := map[string]int{}
		for range 6 {
			time.Sleep(grantStagger)
			synctest.Wait()
			for name, w := range map[string]*waiter{"c1": c1, "c2": c2} {
				if hasTurn(w) {
					got[name]++
				}
			}
		}
		if got["c1"] != 0 || got["c2"] != 1 {
			t.Errorf("rule: in one episode every waiter gets one turn, whatever is inserted in the queue meanwhile; "+
				"later turns: c1 %d (want 0, it had its turn), c2 %d (want 1)", got["c1"], got["c2"])
		}
		C.failed(c2, C.attemptSeq(c2), 0)
		synctest.Wait()
	})
}

func TestWaitLeftoverTurnIsTakenBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var b bus
		A, B := b.process(), b.process()
		kh := wakeKeyHash("k")
		b1 := wait(B, kh)
		a1 := wait(A, kh)
		b.send(context.Background(), "r "+kh)
		time.Sleep(grantStagger)
		synctest.Wait() // b1 let its turn pass (slow): a1 has one too, and does not use it yet
		// b1 takes the key after all: a1's turn is stale.
		B.acquired(b1, time.Minute)
		B.leave(b1, true)
		b.send(context.Background(), "a "+kh+" "+b1.wid+" 1000")
		if hasTurn(a1) {
			t.Error("rule: once someone took the key, a turn not used yet is taken back (it would let its waiter attempt out of queue order at the next release)")
		}
		B.released(kh)
		b.send(context.Background(), "r "+kh+" "+B.token)
		if !hasTurn(a1) {
			t.Error("rule: the next release gives the next waiter its turn")
		}
		synctest.Wait()
	})
}

// Any role can NOTIFY on the channel: a q that is not one of ours is
// ignored, and what q's can make a hub remember is bounded.
func TestWaitForeignQueueNotificationsAreBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var b bus
		A := b.process()
		kh := wakeKeyHash("k")
		for _, p := range []string{
			"q not-a-hash 00000000000000a1 60000",
			"q " + kh + " not-hex-wid!!!!! 60000",
			"q " + kh + " 00000000000000a1 -5",
			"q " + kh + " 00000000000000a1 x",
		} {
			b.send(context.Background(), p)
		}
		if n := len(A.keys); n != 0 {
			t.Fatalf("rule: a malformed q queues nobody; the hub knows %d keys", n)
		}
		for i := range maxQueue + 10 {
			b.send(context.Background(), fmt.Sprintf("q %s %016x 9999999999999", kh, i+1))
		}
		kq := A.keys[kh]
		if kq == nil || len(kq.queue) != maxQueue {
			t.Fatalf("rule: a key's queue is bounded (%d); got %v", maxQueue, kq)
		}
		if d := time.Until(kq.queue[0].deadline); d > time.Duration(maxQueuedMs)*time.Millisecond {
			t.Errorf("rule: a q's timeout is capped at %v; got %v", time.Duration(maxQueuedMs)*time.Millisecond, d)
		}
		for i := range maxKeys + 10 {
			b.send(context.Background(), fmt.Sprintf("q %016x 00000000000000a1 1000", i+1))
		}
		if n := len(A.keys); n > maxKeys {
			t.Errorf("rule: the keys a hub learns from q's are bounded (%d); it knows %d", maxKeys, n)
		}
		A.pruneAll()
		synctest.Wait()
	})
}
