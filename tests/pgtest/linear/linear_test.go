package linear

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/syncguard/syncguard-go/syncguard"
	"github.com/syncguard/syncguard-go/tests/pgtest/history"
)

// The checker must be able to fail: each history below is built by hand
// with one seeded violation, next to a correct one that it must accept.
// Server and local clocks are the same here (times in ms from t0).

var t0 = time.Now().Truncate(time.Second).UnixMilli()

func at(ms int64) time.Time { return time.UnixMilli(t0 + ms) }

// op builds an operation sent at call and returned at ret (ret < 0: never
// returned), with server time srv (0: none) and the expiry it set.
func op(client string, kind history.OpKind, lock string, fence, call, ret, srv, exp int64, out history.Outcome) history.Op {
	o := history.Op{Client: client, Key: "k", Kind: kind, Lock: lock, Fence: fence, Call: at(call), Outcome: out, Source: "client"}
	if ret >= 0 {
		o.Return = at(ret)
	}
	if srv != 0 {
		o.ServerMs = t0 + srv
	}
	if exp != 0 {
		o.ExpiresMs = t0 + exp
	}
	return o
}

func acquire(c, lock string, fence, call, srv, ttl int64) history.Op {
	return op(c, history.OpAcquire, lock, fence, call, srv+5, srv, srv+ttl, history.OK)
}

func extend(c, lock string, call, srv, ttl int64) history.Op {
	return op(c, history.OpExtend, lock, 0, call, srv+5, srv, srv+ttl, history.OK)
}

func release(c, lock string, call int64, out history.Outcome) history.Op {
	return op(c, history.OpRelease, lock, 0, call, call+5, 0, 0, out)
}

func write(c string, fence, call int64, out history.Outcome) history.Op {
	return op(c, history.OpWrite, "", fence, call, call+1, 0, 0, out)
}

// correct is a legal history: hand-offs by release and by expiry, extends
// while live, failed operations of a lost lock, a zombie write rejected.
func correct() []history.Op {
	return []history.Op{
		acquire("a", "A", 1, 0, 2, 1500),
		write("a", 1, 10, history.OK),
		extend("a", "A", 1000, 1002, 1500), // live until 2502
		release("a", "A", 1500, history.OK),
		acquire("b", "B", 2, 1490, 1520, 1500), // after the release returned? concurrent with it: ordered by the model
		write("b", 2, 1600, history.OK),
		write("a", 1, 1700, history.Fail), // a zombie write, rejected
		op("a", history.OpExtend, "A", 0, 1800, 1805, 0, 0, history.Fail),
		acquire("c", "C", 4, 4000, 4100, 1500), // b's lock expired at 3020 + 1000 tolerance; fence 3 was burnt
		op("b", history.OpRelease, "B", 0, 4300, 4305, 0, 0, history.Fail),
		op("b", history.OpLeaseWrite, "B", 2, 4400, 4405, 0, 0, history.Fail),
		op("c", history.OpLeaseWrite, "C", 4, 4400, 4405, 0, 0, history.OK),
		op("d", history.OpAcquire, "", 0, 4500, 4505, 0, 0, history.Fail),
		write("c", 4, 4600, history.OK),
	}
}

func check(t *testing.T, ops []history.Op, opts Options) *Result {
	t.Helper()
	if opts.Dir == "" {
		opts.Dir = t.TempDir()
	}
	start := time.Now()
	r := Check(ops, opts)
	if d := time.Since(start); d > 60*time.Second {
		t.Errorf("the check took %v, more than the 60 s allowed", d)
	}
	return r
}

func TestCorrectHistoryAccepted(t *testing.T) {
	r := check(t, correct(), Options{})
	if r.Verdict != porcupine.Ok {
		t.Fatalf("a correct history rejected:\n%s", r.Line())
	}
	if r.Partitions != 2 || r.Ops != len(correct())-1 {
		t.Errorf("partitions %d, ops %d (the failed acquire is dropped)", r.Partitions, r.Ops)
	}
}

func TestSeededViolationsDetected(t *testing.T) {
	for _, c := range []struct {
		name    string
		ops     []history.Op
		illegal string
	}{
		{"double grant", []history.Op{
			acquire("a", "A", 1, 0, 2, 1500),
			acquire("b", "B", 2, 1000, 1400, 1500), // A live until 1502 + 1000
		}, "lock k"},
		{"fence reused", []history.Op{
			acquire("a", "A", 5, 0, 2, 1500),
			release("a", "A", 100, history.OK),
			acquire("b", "B", 5, 200, 205, 1500),
		}, "lock k"},
		{"extend accepted after expiry", []history.Op{
			acquire("a", "A", 1, 0, 2, 1500),
			extend("a", "A", 2600, 2600, 1500), // expired at 1502 + 1000
		}, "lock k"},
		{"stale release", []history.Op{
			acquire("a", "A", 1, 0, 2, 1500),
			release("a", "A", 3000, history.OK),
		}, "lock k"},
		{"release by a non-holder", []history.Op{
			acquire("a", "A", 1, 0, 2, 1500),
			release("b", "B", 100, history.OK),
		}, "lock k"},
		{"zombie write accepted", []history.Op{
			write("b", 2, 100, history.OK),
			write("a", 1, 200, history.OK),
		}, "resource k"},
		{"zombie lease-checked write accepted", []history.Op{
			acquire("a", "A", 1, 0, 2, 1500),
			acquire("b", "B", 2, 2600, 2605, 1500),
			op("a", history.OpLeaseWrite, "A", 1, 2700, 2705, 0, 0, history.OK),
		}, "lock k"},
		{"extend refused while live", []history.Op{
			acquire("a", "A", 1, 0, 2, 1500),
			op("a", history.OpExtend, "A", 0, 500, 505, 0, 0, history.Fail),
		}, "lock k"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ops := append(correct()[:0:0], c.ops...)
			r := check(t, ops, Options{})
			if r.Verdict != porcupine.Illegal || len(r.Illegal) != 1 || r.Illegal[0] != c.illegal {
				t.Fatalf("not detected:\n%s", r.Line())
			}
			if len(r.Violations()) != 1 || !strings.Contains(r.Line(), "VIOLATION") {
				t.Errorf("violations %v, line %s", r.Violations(), r.Line())
			}
			if b, err := os.ReadFile(r.Files[c.illegal]); err != nil || !strings.Contains(string(b), "<html") {
				t.Errorf("no visualisation at %q: %v", r.Files[c.illegal], err)
			}
		})
	}
}

// Operations of unknown outcome: the audit says which committed. Without
// it they may or may not have taken effect.
func TestUnknownOutcomesResolvedByAudit(t *testing.T) {
	base := []history.Op{
		acquire("a", "A", 1, 0, 2, 1500),
		op("a", history.OpRelease, "A", 0, 100, -1, 0, 0, history.Unknown), // an error: did it commit?
		acquire("b", "B", 2, 300, 305, 1500),
	}
	committed := []history.AuditRow{
		{ID: 1, Table: "locks", Op: "INSERT", Key: "k", NewLock: "A", NewExpires: t0 + 1502, AcquiredAt: t0 + 2, Fence: 1, AtMs: t0 + 2},
		{ID: 2, Table: "locks", Op: "DELETE", Key: "k", OldLock: "A", OldExpires: t0 + 1502, Fence: 1, AtMs: t0 + 101},
		{ID: 3, Table: "locks", Op: "INSERT", Key: "k", NewLock: "B", NewExpires: t0 + 1805, AcquiredAt: t0 + 305, Fence: 2, AtMs: t0 + 305},
	}
	if r := check(t, base, Options{Audit: committed, Audited: true}); r.Verdict != porcupine.Ok || r.Committed != 1 {
		t.Fatalf("the release committed, per the audit:\n%s", r.Line())
	}
	if r := check(t, base, Options{}); r.Verdict != porcupine.Ok || r.Unresolved != 1 {
		t.Fatalf("without an audit the release may have committed:\n%s", r.Line())
	}
	// The audit shows no release: b's acquire was a double grant.
	if r := check(t, base, Options{Audit: []history.AuditRow{committed[0], committed[2]}, Audited: true}); r.Verdict != porcupine.Illegal || r.NotCommitted != 1 {
		t.Fatalf("the release did not commit, per the audit:\n%s", r.Line())
	}
	// An acquire whose reply was lost committed: it is checked from the
	// audit, and here it took a live lock.
	lost := []history.Op{
		acquire("a", "A", 1, 0, 2, 1500),
		op("b", history.OpAcquire, "", 0, 300, 800, 0, 0, history.Unknown),
	}
	audit := []history.AuditRow{
		committed[0],
		{ID: 2, Table: "locks", Op: "UPDATE", Key: "k", OldLock: "A", NewLock: "B", OldExpires: t0 + 1502, NewExpires: t0 + 1810, AcquiredAt: t0 + 310, Fence: 2, AtMs: t0 + 310},
	}
	if r := check(t, lost, Options{Audit: audit, Audited: true}); r.Verdict != porcupine.Illegal || r.AuditOnly != 1 || r.NotCommitted != 1 {
		t.Fatalf("a committed takeover of a live lock, seen only in the audit:\n%s", r.Line())
	}
	// A hand-off: the release of A updates its row to B's lock in one
	// commit; A's release got no answer, B's acquire did.
	handOff := []history.Op{
		acquire("a", "A", 1, 0, 2, 1500),
		op("a", history.OpRelease, "A", 0, 300, -1, 0, 0, history.Unknown),
		acquire("b", "B", 2, 290, 312, 1500),
	}
	if r := check(t, handOff, Options{Audit: audit, Audited: true}); r.Verdict != porcupine.Ok || r.Committed != 1 {
		t.Fatalf("a hand-off (an UPDATE of a live lock by its holder's release) is a release and an acquire:\n%s", r.Line())
	}
}

// HoldingOps turns the holdings the runs record into operations.
func TestHoldingOps(t *testing.T) {
	h := history.New()
	ttl := 1500 * time.Millisecond
	hd := h.Begin("k", "w", acquiredAt(t0+2, ttl, "000000000000001"), ttl, at(0), at(5))
	h.Extended(hd, time.UnixMilli(t0+1002+1500))
	h.ReleaseSent(hd, time.Now())
	h.Ended(hd, "released", true)
	ops := h.Ops()
	if len(ops) != 3 || ops[0].Kind != history.OpAcquire || ops[0].ServerMs != t0+2 || ops[1].Kind != history.OpExtend ||
		ops[1].ServerMs != t0+1002 || ops[2].Kind != history.OpRelease || ops[2].Outcome != history.OK {
		t.Fatalf("ops %+v", ops)
	}
	if r := check(t, ops, Options{}); r.Verdict != porcupine.Ok {
		t.Fatal(r.Line())
	}
}

func acquiredAt(startMs int64, ttl time.Duration, fence string) syncguard.AcquireResult {
	return syncguard.AcquireResult{OK: true, LockID: "AAAAAAAAAAAAAAAAAAAAAA", Fence: syncguard.Fence(fence), ExpiresAt: time.UnixMilli(startMs).Add(ttl)}
}
