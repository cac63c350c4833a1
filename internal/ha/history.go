package ha

import (
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/syncguard/syncguard-go/internal/rules"
	"github.com/syncguard/syncguard-go/syncguard"
)

// holding is one acknowledged holding of a hot key. Server times are in
// milliseconds, from what the library returned (the nodes share this
// machine's clock, so local times compare with them directly).
type holding struct {
	seq      int
	key      string
	worker   string
	lockID   string
	fence    int64
	startMs  int64   // acquire's expiry minus the ttl: the server's acquired_at
	expiries []int64 // acknowledged expiries, in order
	sent     time.Time
	acked    time.Time
	relSent  time.Time // first release attempt (zero: none)
}

func (h *holding) lastExpiryMs() int64 { return h.expiries[len(h.expiries)-1] }

type history struct {
	mu       sync.Mutex
	holdings []*holding
}

func newHistory() *history { return &history{} }

func (hi *history) begin(key, worker, lockID string, fence syncguard.Fence, expiresAt time.Time, ttl time.Duration, sent time.Time) *holding {
	n, _ := fence.Int64()
	exp := expiresAt.UnixMilli()
	h := &holding{key: key, worker: worker, lockID: lockID, fence: n, startMs: exp - ttl.Milliseconds(),
		expiries: []int64{exp}, sent: sent, acked: time.Now()}
	hi.mu.Lock()
	h.seq = len(hi.holdings)
	hi.holdings = append(hi.holdings, h)
	hi.mu.Unlock()
	return h
}

func (hi *history) extended(h *holding, expiresAt time.Time) {
	hi.mu.Lock()
	defer hi.mu.Unlock()
	if ms := expiresAt.UnixMilli(); ms > h.lastExpiryMs() {
		h.expiries = append(h.expiries, ms)
	}
}

func (hi *history) releaseSent(h *holding, t time.Time) {
	hi.mu.Lock()
	defer hi.mu.Unlock()
	if h.relSent.IsZero() {
		h.relSent = t
	}
}

func (hi *history) snapshot() []holding {
	hi.mu.Lock()
	defer hi.mu.Unlock()
	out := make([]holding, len(hi.holdings))
	for i, h := range hi.holdings {
		out[i] = *h
		out[i].expiries = append([]int64(nil), h.expiries...)
	}
	return out
}

// maxFences returns, per key, the largest fence acknowledged so far.
func (hi *history) maxFences() map[string]int64 {
	m := map[string]int64{}
	for _, h := range hi.snapshot() {
		m[h.key] = max(m[h.key], h.fence)
	}
	return m
}

type checkStats struct{ holdings, pairs int }

// statementSlackMs allows for the time between an acquire's
// statement_timestamp() (the recorded start) and its snapshot: an acquire
// that began just before the previous holder's release was sent, but read
// the table after the release committed, records a start before it.
const statementSlackMs = 50

// check verifies, per hot key, over all holdings of the run:
//   - no fence was handed out twice;
//   - ordered by fence, holdings start in the same order (server clock);
//   - a holding starts only after the previous holder released (its first
//     release attempt, less statementSlackMs) or its last acknowledged
//     expiry plus rules.ToleranceMs passed.
func (hi *history) check() ([]Violation, checkStats) {
	all := hi.snapshot()
	byKey := map[string][]holding{}
	for _, h := range all {
		byKey[h.key] = append(byKey[h.key], h)
	}
	st := checkStats{holdings: len(all)}
	var vs []Violation
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		hs := byKey[k]
		sort.Slice(hs, func(i, j int) bool { return hs[i].fence < hs[j].fence })
		for i := 1; i < len(hs); i++ {
			prev, cur := hs[i-1], hs[i]
			if cur.fence == prev.fence {
				vs = append(vs, Violation{Rule: RuleFenceTwice, Key: k, At: later(prev.acked, cur.acked),
					Detail: fmt.Sprintf("fence %d acknowledged to #%d %s (lock %s, acked %s) and to #%d %s (lock %s, acked %s)",
						cur.fence, prev.seq, prev.worker, syncguard.HashKey(prev.lockID)[:8], clock(prev.acked),
						cur.seq, cur.worker, syncguard.HashKey(cur.lockID)[:8], clock(cur.acked))})
				continue
			}
			if cur.startMs < prev.startMs {
				vs = append(vs, Violation{Rule: RuleFenceOrder, Key: k, At: cur.acked,
					Detail: fmt.Sprintf("fence %d (#%d %s) started at %s, before fence %d (#%d %s) at %s",
						cur.fence, cur.seq, cur.worker, clockMs(cur.startMs), prev.fence, prev.seq, prev.worker, clockMs(prev.startMs))})
			}
			allowed := prev.lastExpiryMs() + rules.ToleranceMs
			if !prev.relSent.IsZero() {
				allowed = min(allowed, prev.relSent.UnixMilli()-statementSlackMs)
			}
			st.pairs++
			if cur.startMs < allowed {
				vs = append(vs, Violation{Rule: RuleOverlap, Key: k, At: cur.acked,
					Detail: fmt.Sprintf("fence %d (#%d %s) started at %s, %d ms before fence %d (#%d %s) was released or expired "+
						"(last acknowledged expiry %s + %d ms tolerance; release sent %s)",
						cur.fence, cur.seq, cur.worker, clockMs(cur.startMs), allowed-cur.startMs, prev.fence, prev.seq, prev.worker,
						clockMs(prev.lastExpiryMs()), rules.ToleranceMs, clock(prev.relSent))})
			}
		}
	}
	return vs, st
}

// checkFencesAfter verifies that every holding sent after t has a fence
// above the largest one acknowledged for its key before t.
func (hi *history) checkFencesAfter(t time.Time, maxAcked map[string]int64) []Violation {
	var vs []Violation
	for _, h := range hi.snapshot() {
		if h.sent.After(t) && h.fence <= maxAcked[h.key] {
			vs = append(vs, Violation{Rule: RuleFenceAfter, Key: h.key, At: h.acked,
				Detail: fmt.Sprintf("fence %d (#%d %s, sent %s) after the failover at %s; fence %d was acknowledged before it",
					h.fence, h.seq, h.worker, clock(h.sent), clock(t), maxAcked[h.key])})
		}
	}
	return vs
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func clock(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Format("15:04:05.000")
}

func clockMs(ms int64) string { return clock(time.UnixMilli(ms)) }
