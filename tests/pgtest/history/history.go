// Package history records who held which lock when, as the clients saw
// it, and checks the record against the lock's guarantees: mutual
// exclusion on the server's clock, fences unique and increasing per key,
// and, across a crash or failover, no fence handed out again.
//
// The fault-injection runs (tests/chaos: server crashes, broken and
// half-open connections; tests/ha: failovers) share it, so that both
// check the same rules the same way. All *Ms times are server
// milliseconds, taken from what the library returned; printed times are
// relative to the start of the history.
package history

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/syncguard/syncguard-go/internal/rules"
	"github.com/syncguard/syncguard-go/syncguard"
)

// The rules the checks report; Violation.Rule is one of them when a check
// of this package found it.
const (
	RuleFenceTwice = "fences are unique per key"
	RuleFenceOrder = "fences increase in acquisition order per key"
	RuleOverlap    = "no two holders of one key at the same time"
	RuleFenceAfter = "the next fence after a crash or failover exceeds every fence acknowledged before it"
)

// Holding is one acknowledged holding of a key, as its worker saw it.
type Holding struct {
	Seq      int
	Key      string
	Worker   string
	Fence    int64
	LockHash string // HashKey of the lockId
	TTL      time.Duration
	// StartMs is the acquire's ExpiresAt minus the ttl: the server time of
	// the acquire statement (acquired_at_ms).
	StartMs int64
	// Expiries are the confirmed expiries: the acquire's, then each
	// successful extend's that changed it.
	Expiries []int64
	// ExtendSeen[i] is the local time Expiries[i+1] was recorded: when its
	// extend had returned at the latest.
	ExtendSeen []time.Time
	AcqSent    time.Time // local time the acquire was sent
	AckedAt    time.Time // local time it returned OK
	// ReleaseSent is when the holder first sent a release (zero: never).
	// From then on the lock may be gone, whatever the outcome.
	ReleaseSent time.Time
	ReleaseOK   bool
	// End says how the holding ended, in the recorder's words (for
	// example "released", "release:<reason>", "lost:<why>"), or "" while
	// it runs or when nobody said. Compact forgets only ended holdings.
	End string
	// EndedAt is the local time End was recorded.
	EndedAt time.Time
}

// LastExpiryMs is the last confirmed expiry.
func (h *Holding) LastExpiryMs() int64 { return h.Expiries[len(h.Expiries)-1] }

// Event is one operation in a key's log.
type Event struct {
	At      time.Time
	Dur     time.Duration
	Worker  string
	Op      string
	Outcome string
}

// History records holdings and per-key operation logs. It is safe for
// concurrent use.
type History struct {
	mu       sync.Mutex
	t0       time.Time
	holdings []*Holding
	events   map[string][]Event
	seq      int  // holdings begun
	ops      []Op // recorded with Record (ops.go)

	// What Compact checked and dropped; Check adds it to its results.
	compacted  CheckStats
	compactVs  []Violation
	compactMax map[string]int64 // per key, the largest fence dropped
}

const maxEventsPerKey = 4000

// New starts an empty history; times print relative to now.
func New() *History { return &History{t0: time.Now(), events: map[string][]Event{}} }

// Start is the time the history's printed times are relative to.
func (h *History) Start() time.Time { return h.t0 }

func (h *History) rel(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return fmt.Sprintf("%+.3fs", t.Sub(h.t0).Seconds())
}

func (h *History) relMs(ms int64) string { return h.rel(time.UnixMilli(ms)) }

// Begin records an acknowledged acquire: r is what the library returned,
// ttl what was asked for, sent and acked the local times the acquire was
// sent and returned.
func (h *History) Begin(key, worker string, r syncguard.AcquireResult, ttl time.Duration, sent, acked time.Time) *Holding {
	n, _ := r.Fence.Int64()
	exp := r.ExpiresAt.UnixMilli()
	hd := &Holding{Key: key, Worker: worker, Fence: n, LockHash: syncguard.HashKey(r.LockID), TTL: ttl,
		StartMs: exp - ttl.Milliseconds(), Expiries: []int64{exp}, AcqSent: sent, AckedAt: acked}
	h.mu.Lock()
	hd.Seq = h.seq
	h.seq++
	h.holdings = append(h.holdings, hd)
	h.mu.Unlock()
	return hd
}

// Extended records a confirmed expiry (one equal to the last is not
// recorded again).
func (h *History) Extended(hd *Holding, expiresAt time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	ms := expiresAt.UnixMilli()
	if ms != hd.Expiries[len(hd.Expiries)-1] {
		hd.Expiries = append(hd.Expiries, ms)
		hd.ExtendSeen = append(hd.ExtendSeen, time.Now())
	}
}

// ReleaseSent records the first release attempt.
func (h *History) ReleaseSent(hd *Holding, t time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if hd.ReleaseSent.IsZero() {
		hd.ReleaseSent = t
	}
}

// Ended records how a holding ended.
func (h *History) Ended(hd *Holding, end string, releaseOK bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	hd.End, hd.ReleaseOK, hd.EndedAt = end, releaseOK, time.Now()
}

// Event adds an operation to key's log (the oldest half of a long log is
// dropped).
func (h *History) Event(key string, e Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	l := h.events[key]
	if len(l) >= maxEventsPerKey {
		l = append(l[:0], l[len(l)/2:]...)
	}
	h.events[key] = append(l, e)
}

// Begun is the number of holdings recorded, compacted ones included.
func (h *History) Begun() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.seq
}

// Retained is the number of holdings kept in memory.
func (h *History) Retained() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.holdings)
}

// Holdings returns a snapshot of the holdings.
func (h *History) Holdings() []Holding {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]Holding, len(h.holdings))
	for i, hd := range h.holdings {
		out[i] = *hd
		out[i].Expiries = append([]int64(nil), hd.Expiries...)
		out[i].ExtendSeen = append([]time.Time(nil), hd.ExtendSeen...)
	}
	return out
}

// MaxAckedFences returns, per key, the largest fence acknowledged before t.
func (h *History) MaxAckedFences(t time.Time) map[string]int64 {
	m := map[string]int64{}
	h.mu.Lock()
	for k, f := range h.compactMax {
		m[k] = f
	}
	h.mu.Unlock()
	for _, hd := range h.Holdings() {
		if hd.AckedAt.Before(t) && hd.Fence > m[hd.Key] {
			m[hd.Key] = hd.Fence
		}
	}
	return m
}

// Violation is a broken invariant with the evidence.
type Violation struct {
	Rule   string
	Key    string
	Detail string
	// History is the part of the key's history around the violation.
	History string
	// At is when the broken guarantee showed: the acknowledgement of the
	// offending holding, or when a check found the problem.
	At time.Time
}

func (v Violation) String() string {
	s := "rule: " + v.Rule
	if v.Key != "" {
		s += "\nkey: " + v.Key
	}
	if v.Detail != "" {
		s += "\n" + v.Detail
	}
	if v.History != "" {
		s += "\n" + v.History
	}
	return s
}

// CheckStats summarizes a check.
type CheckStats struct {
	Holdings int
	Pairs    int // consecutive holdings of a key checked for exclusion
	// MinGapMs is the smallest distance between a new holder's start and
	// the previous holder's first release attempt or expiry plus tolerance,
	// whichever came first (without the slack).
	MinGapMs int64
	// HandoffsByRelease and HandoffsByExpiry count how each checked pair
	// was allowed: the previous holder released, or its lock expired.
	HandoffsByRelease, HandoffsByExpiry int
}

// Check verifies mutual exclusion and fence order over all holdings:
//
//   - fences are unique per key (RuleFenceTwice);
//   - ordered by fence, holdings start in the same order, on the server's
//     clock (RuleFenceOrder);
//   - a holding starts only after the previous holder of the key released
//     (its first release attempt, less slackMs) or its last confirmed
//     expiry plus the liveness tolerance passed (RuleOverlap).
//
// slackMs allows for the two clocks compared: the release's send time is
// this process's, the next holding's start the server's (read after the
// acquire's snapshot, so never before the release's commit on one server;
// before rules.NowMsSQL used clock_timestamp() it was the statement's
// arrival, up to milliseconds earlier on a loaded server).
func (h *History) Check(slackMs int64) ([]Violation, CheckStats) {
	all := h.Holdings()
	byKey := byKeyAndFence(all)
	st := CheckStats{Holdings: len(all), MinGapMs: 1 << 62}
	vs := h.checkPairs(byKey, slackMs, &st, func(string, []Holding) int { return 1 << 62 })
	h.mu.Lock()
	c := h.compacted
	vs = append(append([]Violation(nil), h.compactVs...), vs...)
	h.mu.Unlock()
	st.Holdings += c.Holdings
	st.Pairs += c.Pairs
	st.HandoffsByRelease += c.HandoffsByRelease
	st.HandoffsByExpiry += c.HandoffsByExpiry
	if c.Pairs > 0 {
		st.MinGapMs = min(st.MinGapMs, c.MinGapMs)
	}
	if st.Pairs == 0 {
		st.MinGapMs = 0
	}
	return vs, st
}

func byKeyAndFence(all []Holding) map[string][]Holding {
	byKey := map[string][]Holding{}
	for _, hd := range all {
		byKey[hd.Key] = append(byKey[hd.Key], hd)
	}
	for _, hs := range byKey {
		sort.Slice(hs, func(i, j int) bool { return hs[i].Fence < hs[j].Fence })
	}
	return byKey
}

// Compact checks, and then forgets, the holdings that can no longer take
// part in a violation, so that a long soak's checker keeps a bounded
// history: per key, in fence order, the ended holdings acknowledged before
// before, except the last holding of the key (the next holding is checked
// against it). The pairs they form are checked now, with the same rules as
// Check, whose results include them. Only for runs without crashes
// (CheckFencesAfter and MaxAckedFences need every holding).
func (h *History) Compact(slackMs int64, before time.Time) {
	byKey := byKeyAndFence(h.Holdings())
	var st CheckStats
	st.MinGapMs = 1 << 62
	drop := map[int]bool{}
	// checkPairs checks pairs (hs[i-1], hs[i]) for i < limit: every pair
	// whose first holding is dropped.
	vs := h.checkPairs(byKey, slackMs, &st, func(k string, hs []Holding) int {
		p := 0
		for p < len(hs)-1 && hs[p].End != "" && hs[p].AckedAt.Before(before) {
			drop[hs[p].Seq] = true
			p++
		}
		return p + 1
	})
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.compactMax == nil {
		h.compactMax = map[string]int64{}
	}
	keep := h.holdings[:0]
	for _, hd := range h.holdings {
		if drop[hd.Seq] {
			h.compactMax[hd.Key] = max(h.compactMax[hd.Key], hd.Fence)
			continue
		}
		keep = append(keep, hd)
	}
	clear(h.holdings[len(keep):])
	h.holdings = keep
	h.compactVs = append(h.compactVs, vs...)
	c := &h.compacted
	c.Holdings += len(drop)
	if st.Pairs > 0 {
		if c.Pairs == 0 {
			c.MinGapMs = st.MinGapMs
		} else {
			c.MinGapMs = min(c.MinGapMs, st.MinGapMs)
		}
	}
	c.Pairs += st.Pairs
	c.HandoffsByRelease += st.HandoffsByRelease
	c.HandoffsByExpiry += st.HandoffsByExpiry
}

// checkPairs checks the pairs (hs[i-1], hs[i]) of every key's holdings in
// fence order, for 1 <= i < limit(key, hs), adding to st.
func (h *History) checkPairs(byKey map[string][]Holding, slackMs int64, st *CheckStats, limit func(string, []Holding) int) []Violation {
	var vs []Violation
	for _, k := range slices.Sorted(maps.Keys(byKey)) {
		hs := byKey[k]
		for i := 1; i < min(len(hs), limit(k, hs)); i++ {
			prev, cur := hs[i-1], hs[i]
			if cur.Fence == prev.Fence {
				vs = append(vs, Violation{Rule: RuleFenceTwice, Key: k, At: later(prev.AckedAt, cur.AckedAt),
					Detail:  fmt.Sprintf("fence %d handed to #%d (%s) and #%d (%s)", cur.Fence, prev.Seq, prev.Worker, cur.Seq, cur.Worker),
					History: h.describe(k, hs, i)})
				continue
			}
			if cur.StartMs < prev.StartMs {
				vs = append(vs, Violation{Rule: RuleFenceOrder, Key: k, At: cur.AckedAt,
					Detail: fmt.Sprintf("fence %d (#%d, %s) started at %s, before fence %d (#%d, %s) at %s",
						cur.Fence, cur.Seq, cur.Worker, h.relMs(cur.StartMs), prev.Fence, prev.Seq, prev.Worker, h.relMs(prev.StartMs)),
					History: h.describe(k, hs, i)})
			}
			allowed := prev.LastExpiryMs() + rules.ToleranceMs
			byRelease := false
			if !prev.ReleaseSent.IsZero() {
				if r := prev.ReleaseSent.UnixMilli() - slackMs; r < allowed {
					allowed, byRelease = r, true
				}
			}
			st.Pairs++
			gap := cur.StartMs - allowed
			if byRelease {
				st.HandoffsByRelease++
				st.MinGapMs = min(st.MinGapMs, gap-slackMs)
			} else {
				st.HandoffsByExpiry++
				st.MinGapMs = min(st.MinGapMs, gap)
			}
			if gap < 0 {
				vs = append(vs, Violation{Rule: RuleOverlap, Key: k, At: cur.AckedAt,
					Detail: fmt.Sprintf("fence %d (#%d, %s) started at %s, %d ms before fence %d (#%d, %s) released or expired "+
						"(last confirmed expiry %s + %d ms tolerance; first release sent %s, slack %d ms)",
						cur.Fence, cur.Seq, cur.Worker, h.relMs(cur.StartMs), -gap, prev.Fence, prev.Seq, prev.Worker,
						h.relMs(prev.LastExpiryMs()), rules.ToleranceMs, h.rel(prev.ReleaseSent), slackMs),
					History: h.describe(k, hs, i)})
			}
		}
	}
	return vs
}

// CheckFencesAfter verifies that every holding acquired (sent) after t has
// a fence above the largest one acknowledged for its key before t (a
// crash, a failover); maxAcked is MaxAckedFences taken then.
func (h *History) CheckFencesAfter(t time.Time, maxAcked map[string]int64) []Violation {
	var vs []Violation
	for _, hd := range h.Holdings() {
		if hd.AcqSent.After(t) && hd.Fence <= maxAcked[hd.Key] {
			vs = append(vs, Violation{Rule: RuleFenceAfter, Key: hd.Key, At: hd.AckedAt,
				Detail: fmt.Sprintf("fence %d (#%d, %s) acquired at %s, sent after the crash or failover at %s; fence %d was acknowledged before it",
					hd.Fence, hd.Seq, hd.Worker, h.relMs(hd.StartMs), h.rel(t), maxAcked[hd.Key])})
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

// describe prints the holdings around index i of hs (sorted by fence) and
// the key's operations in that time window.
func (h *History) describe(key string, hs []Holding, i int) string {
	var b strings.Builder
	lo, hi := max(0, i-3), min(len(hs), i+3)
	fmt.Fprintf(&b, "holdings of the key by fence (times relative to the run start, server clock):\n")
	for _, hd := range hs[lo:hi] {
		mark := "  "
		if hd.Fence == hs[i].Fence || hd.Fence == hs[max(0, i-1)].Fence {
			mark = "=>"
		}
		exps := make([]string, len(hd.Expiries))
		for j, e := range hd.Expiries {
			exps[j] = h.relMs(e)
		}
		fmt.Fprintf(&b, "%s fence=%d #%d %-14s lock#%s start=%s expiries=[%s] acqSent=%s acked=%s releaseSent=%s end=%q\n",
			mark, hd.Fence, hd.Seq, hd.Worker, hd.LockHash[:8], h.relMs(hd.StartMs), strings.Join(exps, " "),
			h.rel(hd.AcqSent), h.rel(hd.AckedAt), h.rel(hd.ReleaseSent), hd.End)
	}
	from := time.UnixMilli(hs[max(0, i-1)].StartMs).Add(-time.Second)
	to := time.UnixMilli(hs[i].StartMs).Add(2 * time.Second)
	h.mu.Lock()
	evs := append([]Event(nil), h.events[key]...)
	h.mu.Unlock()
	if len(evs) == 0 {
		return b.String()
	}
	fmt.Fprintf(&b, "operations on the key from %s to %s:\n", h.rel(from), h.rel(to))
	n := 0
	for _, e := range evs {
		if e.At.Before(from) || e.At.After(to) {
			continue
		}
		if n++; n > 200 {
			b.WriteString("  ...\n")
			break
		}
		fmt.Fprintf(&b, "  %s %-14s %-8s %6.1fms %s\n", h.rel(e.At), e.Worker, e.Op, float64(e.Dur.Microseconds())/1000, e.Outcome)
	}
	return b.String()
}
