package history

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/syncguard/syncguard-go/syncguard"
)

// The checker must catch what it is there for: these histories are built
// by hand, each with one broken invariant.

func holding(h *History, key, worker string, fence int64, startMs, ttlMs int64, releaseSent time.Time) *Holding {
	r := syncguard.AcquireResult{OK: true, LockID: "AAAAAAAAAAAAAAAAAAAAAA", Fence: syncguard.Fence(pad15(fence)),
		ExpiresAt: time.UnixMilli(startMs + ttlMs)}
	hd := h.Begin(key, worker, r, time.Duration(ttlMs)*time.Millisecond, time.UnixMilli(startMs), time.UnixMilli(startMs+1))
	if !releaseSent.IsZero() {
		h.ReleaseSent(hd, releaseSent)
		h.Ended(hd, "released", true)
	}
	return hd
}

func pad15(n int64) string { return fmt.Sprintf("%015d", n) }

func ruleNames(vs []Violation) string {
	var s []string
	for _, v := range vs {
		s = append(s, v.Rule)
	}
	return strings.Join(s, "; ")
}

func TestCheckAcceptsCleanHandoffs(t *testing.T) {
	h := New()
	t0 := time.Now().UnixMilli()
	holding(h, "k", "a", 1, t0, 1500, time.UnixMilli(t0+500))       // released at +500
	holding(h, "k", "b", 2, t0+500, 1500, time.Time{})              // abandoned: expires at +2000
	x := holding(h, "k", "c", 3, t0+3000, 1500, time.Time{})        // takes over at expiry + 1000
	h.Extended(x, time.UnixMilli(t0+5000))                          // extended to +5000
	holding(h, "k", "d", 5, t0+6000, 1500, time.UnixMilli(t0+6100)) // fence 4 was never acknowledged: a gap
	vs, st := h.Check(0)
	if len(vs) != 0 {
		t.Fatalf("clean history flagged: %v", vs)
	}
	if st.Pairs != 3 || st.HandoffsByRelease != 1 || st.HandoffsByExpiry != 2 || st.MinGapMs != 0 {
		t.Fatalf("stats %+v", st)
	}
}

func TestCheckCatchesOverlap(t *testing.T) {
	h := New()
	t0 := time.Now().UnixMilli()
	a := holding(h, "k", "a", 1, t0, 1500, time.Time{})
	h.Extended(a, time.UnixMilli(t0+2500))
	holding(h, "k", "b", 2, t0+3000, 1500, time.Time{}) // before 2500 + 1000
	h.Event("k", Event{At: time.UnixMilli(t0 + 3000), Worker: "b", Op: "acquire", Outcome: "ok fence=2"})
	vs, _ := h.Check(0)
	if len(vs) != 1 || vs[0].Rule != RuleOverlap {
		t.Fatalf("got %s", ruleNames(vs))
	}
	for _, want := range []string{"500 ms before fence 1", "=> fence=1", "=> fence=2", "acquire  ", "ok fence=2"} {
		if !strings.Contains(vs[0].String(), want) {
			t.Errorf("violation lacks %q:\n%s", want, vs[0])
		}
	}
}

func TestCheckCatchesStartBeforeRelease(t *testing.T) {
	h := New()
	t0 := time.Now().UnixMilli()
	holding(h, "k", "a", 1, t0, 10000, time.UnixMilli(t0+2000))
	holding(h, "k", "b", 2, t0+1700, 1500, time.Time{}) // 300 ms before the release was sent
	if vs, _ := h.Check(100); len(vs) != 1 {
		t.Fatalf("slack 100: got %q", ruleNames(vs))
	}
	if vs, _ := h.Check(400); len(vs) != 0 {
		t.Fatalf("slack 400: got %q", ruleNames(vs))
	}
}

func TestCheckCatchesFenceProblems(t *testing.T) {
	h := New()
	t0 := time.Now().UnixMilli()
	holding(h, "k", "a", 7, t0, 1000, time.UnixMilli(t0+100))
	holding(h, "k", "b", 7, t0+200, 1000, time.UnixMilli(t0+300))
	holding(h, "j", "a", 2, t0, 1000, time.UnixMilli(t0+100))
	holding(h, "j", "b", 3, t0-5000, 1000, time.UnixMilli(t0-4900)) // larger fence, earlier start
	vs, _ := h.Check(0)
	got := ruleNames(vs)
	if !strings.Contains(got, RuleFenceTwice) || !strings.Contains(got, RuleFenceOrder) {
		t.Fatalf("got %q", got)
	}
}

func TestCheckFencesAfterCrash(t *testing.T) {
	h := New()
	t0 := time.Now()
	holding(h, "k", "a", 5, t0.UnixMilli(), 1000, time.Time{})
	crash := time.Now().Add(time.Millisecond)
	maxAcked := h.MaxAckedFences(crash.Add(time.Second))
	r := syncguard.AcquireResult{OK: true, LockID: "AAAAAAAAAAAAAAAAAAAAAA", Fence: "000000000000004", ExpiresAt: time.Now().Add(time.Second)}
	h.Begin("k", "b", r, time.Second, crash.Add(10*time.Millisecond), time.Now())
	vs := h.CheckFencesAfter(crash, maxAcked)
	if len(vs) != 1 || !strings.Contains(vs[0].Detail, "fence 5 was acknowledged") {
		t.Fatalf("got %v", vs)
	}
}

// Compact forgets finished holdings but keeps every verdict: a history
// checked in pieces gives what Check gives on the whole, and the memory
// kept is bounded by the holdings that may still matter.
func TestCompactKeepsVerdictsAndBoundsHistory(t *testing.T) {
	build := func(compact func(h *History, i int)) *History {
		h := New()
		t0 := time.Now().UnixMilli() - 1_000_000
		for i := range 300 {
			for _, k := range []string{"k1", "k2"} {
				start := t0 + int64(i)*1000
				if k == "k2" && i == 150 {
					start -= 600 // overlaps the previous holder: a violation
				}
				holding(h, k, "w", int64(i+1), start, 1500, time.UnixMilli(start+500))
			}
			compact(h, i)
		}
		// One holding still running.
		holding(h, "k1", "w", 301, t0+300*1000, 1500, time.Time{})
		return h
	}
	whole := build(func(*History, int) {})
	pieces := build(func(h *History, i int) {
		if i%37 == 0 {
			h.Compact(0, time.Now())
		}
	})
	vw, sw := whole.Check(0)
	vp, sp := pieces.Check(0)
	if ruleNames(vw) != ruleNames(vp) || len(vw) != 1 {
		t.Fatalf("violations: whole %q, compacted %q", ruleNames(vw), ruleNames(vp))
	}
	if sw != sp {
		t.Fatalf("stats: whole %+v, compacted %+v", sw, sp)
	}
	pieces.Compact(0, time.Now())
	if n := pieces.Retained(); n > 3 {
		t.Errorf("after Compact the checker keeps the last holding of each key and the running one; kept %d", n)
	}
	if _, st := pieces.Check(0); st != sw {
		t.Errorf("stats after the last Compact: %+v, want %+v", st, sw)
	}
	if m := pieces.MaxAckedFences(time.Now()); m["k1"] != 301 || m["k2"] != 300 {
		t.Errorf("MaxAckedFences after Compact: %v", m)
	}
}
