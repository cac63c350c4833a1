package ha

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// Rules checked by Run; Violation.Rule is one of them.
const (
	RuleAcked      = "no acknowledged acquire or extend is lost"
	RuleFenceTwice = "no fence is issued twice"
	RuleFenceOrder = "fences increase in acquisition order per key"
	RuleFenceAfter = "a fence after a failover exceeds every fence acknowledged before it"
	RuleOverlap    = "no two holders of one key overlap (server clock)"
	RuleErrors     = "every error is a typed, retryable *syncguard.Error"
)

// Violation is a broken invariant with its evidence.
type Violation struct {
	Rule   string
	Key    string
	Detail string
}

func (v Violation) String() string {
	s := "rule: " + v.Rule
	if v.Key != "" {
		s += "\nkey: " + v.Key
	}
	return s + "\n" + v.Detail
}

// FaultResult is what one fault cost.
type FaultResult struct {
	Kind FaultKind
	Node string    // the primary that was hit
	At   time.Time // when
	// InPlace: the keeper restarted the killed postmaster on the same
	// node before the monitor failed over (KillPostmaster only); Promoted
	// is then 0.
	InPlace bool
	// Promoted is the time until the monitor reported the standby as
	// wait_primary or primary.
	Promoted time.Duration
	// FirstAcquire is, per adapter, the time from the fault to the first
	// successful acquire sent after it (-1: none).
	FirstAcquire map[string]time.Duration
	// Stable is the time until the formation had a primary and a
	// secondary again (the old primary rewound and following).
	Stable           time.Duration
	SentinelsChecked int
}

type fenceCheck struct {
	at  time.Time
	max map[string]int64
}

// Report is the outcome of Run.
type Report struct {
	Async    bool
	Timeouts Timeouts
	Seed     uint64
	Duration time.Duration
	Faults   []FaultResult
	// RecoveryP50 and RecoveryMax are over all faults and both adapters of
	// FirstAcquire.
	RecoveryP50, RecoveryMax time.Duration
	Ops                      map[string]int64 // "adapter op outcome" -> count
	Errors                   map[string]int64 // "adapter op code SQLSTATE: message" -> count
	LeaseLosses              map[string]int64 // how AutoExtend leases ended early
	Holdings, Pairs          int              // hot-key holdings; consecutive pairs checked
	SentinelChecks           int              // sentinel lookups after failovers
	Violations               []Violation

	fenceChecks []fenceCheck
}

// ViolationsByRule counts the violations per rule.
func (r *Report) ViolationsByRule() map[string]int {
	m := map[string]int{}
	for _, v := range r.Violations {
		m[v.Rule]++
	}
	return m
}

// Acquires counts the successful acquires of an adapter (any path).
func (r *Report) Acquires(adapter string) int64 {
	var n int64
	for k, c := range r.Ops {
		if strings.HasPrefix(k, adapter+" ") && (strings.HasSuffix(k, "withlock ok") || strings.HasSuffix(k, "lock ok") || strings.HasSuffix(k, "sentinel-acquire ok")) {
			n += c
		}
	}
	return n
}

// Summary is a readable report.
func (r *Report) Summary() string {
	var b strings.Builder
	mode := "synchronous"
	if r.Async {
		mode = "ASYNCHRONOUS"
	}
	fmt.Fprintf(&b, "replication: %s; %v of load, seed %d\n", mode, r.Duration.Round(time.Second), r.Seed)
	fmt.Fprintf(&b, "failover manager timeouts: %s\n", r.Timeouts)
	fmt.Fprintf(&b, "faults:\n")
	for i, f := range r.Faults {
		kind := string(f.Kind)
		promoted := "promoted " + ms(f.Promoted)
		if f.InPlace {
			promoted = "restarted in place, no failover"
		}
		fmt.Fprintf(&b, "  %d. %-20s on %s: %s, first acquire pq %6s pgx %6s, stable %6v, sentinels verified %d\n",
			i+1, kind, f.Node, promoted, ms(f.FirstAcquire["pq"]),
			ms(f.FirstAcquire["pgx"]), f.Stable.Round(time.Millisecond), f.SentinelsChecked)
	}
	fmt.Fprintf(&b, "time from the primary's death to the first successful acquire: p50 %v, max %v (%d samples)\n",
		r.RecoveryP50.Round(time.Millisecond), r.RecoveryMax.Round(time.Millisecond), 2*len(r.Faults))
	fmt.Fprintf(&b, "acquires: pq %d, pgx %d; hot-key holdings %d, hand-offs checked %d; sentinel lookups %d\n",
		r.Acquires("pq"), r.Acquires("pgx"), r.Holdings, r.Pairs, r.SentinelChecks)
	b.WriteString("operations:\n")
	writeCounts(&b, r.Ops)
	b.WriteString("errors (adapter op code SQLSTATE: message):\n")
	writeCounts(&b, r.Errors)
	if len(r.LeaseLosses) > 0 {
		b.WriteString("AutoExtend leases ended early:\n")
		writeCounts(&b, r.LeaseLosses)
	}
	if len(r.Violations) == 0 {
		b.WriteString("invariants: all held\n")
	} else {
		b.WriteString("invariants BROKEN:\n")
		byRule := r.ViolationsByRule()
		rules := make([]string, 0, len(byRule))
		for k := range byRule {
			rules = append(rules, k)
		}
		sort.Strings(rules)
		for _, k := range rules {
			fmt.Fprintf(&b, "  %4d x %s\n", byRule[k], k)
		}
	}
	return b.String()
}

func ms(d time.Duration) string {
	if d < 0 {
		return "none"
	}
	return d.Round(time.Millisecond).String()
}

func writeCounts[V int | int64](b *strings.Builder, m map[string]V) {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(b, "  %7d  %s\n", m[k], k)
	}
	if len(keys) == 0 {
		b.WriteString("  (none)\n")
	}
}
