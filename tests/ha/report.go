package ha

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/syncguard/syncguard-go/tests/pgtest/history"
	"github.com/syncguard/syncguard-go/tests/pgtest/linear"
)

// Rules checked by Run; the Rule of every Report.Violations entry is one
// of them (the history checks shared with tests/chaos report the four
// from package history).
const (
	RuleAcked      = "no acknowledged acquire or extend is lost"
	RuleFenceTwice = history.RuleFenceTwice
	RuleFenceOrder = history.RuleFenceOrder
	RuleFenceAfter = history.RuleFenceAfter
	RuleOverlap    = history.RuleOverlap
	RuleErrors     = "every error is a typed, retryable *syncguard.Error"
)

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
	// Recovery is, per adapter, the time from the fault to the acquire
	// acknowledged at the end of the longest outage after it: the first
	// acquire on the new primary (-1: none).
	Recovery map[string]time.Duration
	// MaxGap is, per adapter, the longest time from the fault to the
	// formation being stable again without an acknowledged acquire.
	MaxGap map[string]time.Duration
	// Stable is the time until the formation had a primary and a
	// secondary again (the old primary rewound and following).
	Stable           time.Duration
	SentinelsChecked int
	// Note is what the harness had to do besides waiting (e.g. reinit a
	// member left on a diverged timeline).
	Note string
}

type fenceCheck struct {
	at  time.Time
	max map[string]int64
}

// Report is the outcome of Run.
type Report struct {
	Async bool
	// Settings are the failover manager's timing settings.
	Settings string
	// Adapters names the clients of the load (adapter and route).
	Adapters []string
	Seed     uint64
	Duration time.Duration
	Faults   []FaultResult
	// RecoveryP50 and RecoveryMax are over all faults and both adapters of
	// FirstAcquire.
	RecoveryP50, RecoveryMax time.Duration
	// GapP50 and GapMax are over all faults and both adapters of MaxGap.
	GapP50, GapMax  time.Duration
	Ops             map[string]int64 // "adapter op outcome" -> count
	Errors          map[string]int64 // "adapter op code SQLSTATE: message" -> count
	LeaseLosses     map[string]int64 // how AutoExtend leases ended early
	Holdings, Pairs int              // hot-key holdings; consecutive pairs checked
	SentinelChecks  int              // sentinel lookups after failovers
	Violations      []history.Violation
	// Linear is the linearizability checker's verdict over the hot keys'
	// operations and the audit (tests/pgtest/linear); its violations are
	// in Violations too, under linear.Rule.
	Linear *linear.Result
	// Kinds are the lock kinds' figures by kind (kindcheck.Kinds); their
	// violations are in Violations too, under kindcheck's rules.
	Kinds map[string]*KindStats
	// KindsDump is the file with the lock kinds' evidence, saved on a
	// violation of one of their rules ("": none).
	KindsDump string

	fenceChecks []fenceCheck
}

// auditTables are the tables the run uses (syncguard's defaults).
var auditTables = [2]string{"syncguard_locks", "syncguard_fence_counters"}

// installAudit adds the audit trigger (history.InstallAudit) to the
// formation's lock tables: it replicates with them.
func (r *runner) installAudit(ctx context.Context) error {
	return history.InstallAudit(ctx, r.ad[1].db, auditTables[0], auditTables[1])
}

// checkLinear runs the linearizability checker over the run's operations,
// with the audit as the primary has it after the last failover (what a
// failover lost is lost from it too), and adds its verdict to the report.
func (r *runner) checkLinear() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	opts := linear.Options{Dir: r.o.Dir}
	var err error
	if opts.Audit, err = history.ReadAudit(ctx, r.ad[1].db, auditTables[0]); err == nil {
		opts.Audited = true
	} else {
		r.o.Logf("ha: reading the audit: %v (unknown outcomes stay unknown)", err)
	}
	r.addLinear(linear.Check(r.hist.Ops(), opts))
}

func (r *runner) addLinear(res *linear.Result) {
	r.o.Logf("ha: %s", res.Line())
	r.repMu.Lock()
	defer r.repMu.Unlock()
	r.rep.Linear = res
	r.rep.Violations = append(r.rep.Violations, res.Violations()...)
}

// faultBefore returns the index of the last fault at or before t (-1:
// none).
func (r *Report) faultBefore(t time.Time) int {
	i := -1
	for j, f := range r.Faults {
		if !f.At.After(t) {
			i = j
		}
	}
	return i
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
	fmt.Fprintf(&b, "%s\n", r.Settings)
	fmt.Fprintf(&b, "faults:\n")
	for i, f := range r.Faults {
		kind := string(f.Kind)
		promoted := "promoted " + ms(f.Promoted)
		if f.InPlace {
			promoted = "restarted in place, no failover"
		}
		var firsts, gaps, recs []string
		for _, a := range r.Adapters {
			firsts = append(firsts, a+" "+ms(f.FirstAcquire[a]))
			gaps = append(gaps, a+" "+ms(f.MaxGap[a]))
			if d, ok := f.Recovery[a]; ok {
				recs = append(recs, a+" "+ms(d))
			}
		}
		rec := ""
		if len(recs) > 0 {
			rec = "; recovered " + strings.Join(recs, ", ")
		}
		fmt.Fprintf(&b, "  %d. %-20s on %s: %s; first acquire %s%s; longest gap %s; stable %v; sentinels verified %d\n",
			i+1, kind, f.Node, promoted, strings.Join(firsts, ", "), rec, strings.Join(gaps, ", "), f.Stable.Round(time.Millisecond), f.SentinelsChecked)
		if f.Note != "" {
			fmt.Fprintf(&b, "     note: %s\n", f.Note)
		}
	}
	fmt.Fprintf(&b, "time from the primary's death to the first successful acquire: p50 %v, max %v (%d samples)\n",
		r.RecoveryP50.Round(time.Millisecond), r.RecoveryMax.Round(time.Millisecond), len(r.Adapters)*len(r.Faults))
	fmt.Fprintf(&b, "longest time without a successful acquire per fault and adapter: p50 %v, max %v\n",
		r.GapP50.Round(time.Millisecond), r.GapMax.Round(time.Millisecond))
	var acq []string
	for _, a := range r.Adapters {
		acq = append(acq, fmt.Sprintf("%s %d", a, r.Acquires(a)))
	}
	fmt.Fprintf(&b, "acquires: %s; hot-key holdings %d, hand-offs checked %d; sentinel lookups %d\n",
		strings.Join(acq, ", "), r.Holdings, r.Pairs, r.SentinelChecks)
	b.WriteString("operations:\n")
	writeCounts(&b, r.Ops)
	b.WriteString("errors (adapter op code SQLSTATE: message):\n")
	writeCounts(&b, r.Errors)
	if len(r.LeaseLosses) > 0 {
		b.WriteString("AutoExtend leases ended early:\n")
		writeCounts(&b, r.LeaseLosses)
	}
	if r.Linear != nil {
		b.WriteString(r.Linear.Line() + "\n")
	}
	byRule := r.ViolationsByRule()
	b.WriteString("rule checks (violations):\n")
	for _, rule := range []string{RuleAcked, RuleFenceTwice, RuleFenceOrder, RuleFenceAfter, RuleOverlap, RuleErrors, linear.Rule} {
		fmt.Fprintf(&b, "  %4d  %s\n", byRule[rule], rule)
	}
	r.kindsSummary(&b)
	if len(r.Violations) == 0 {
		b.WriteString("invariants: all held\n")
	} else {
		b.WriteString("invariants BROKEN:\n")
		for _, k := range slices.Sorted(maps.Keys(byRule)) {
			fmt.Fprintf(&b, "  %4d x %s\n", byRule[k], k)
		}
		b.WriteString("violations by the last fault before them:\n")
		byFault := map[int]int{}
		for _, v := range r.Violations {
			byFault[r.faultBefore(v.At)]++
		}
		for i := -1; i < len(r.Faults); i++ {
			if n := byFault[i]; n > 0 {
				what := "before the first fault"
				if i >= 0 {
					what = fmt.Sprintf("after fault %d (%s", i+1, r.Faults[i].Kind)
					if r.Faults[i].InPlace {
						what += ", restarted in place)"
					} else {
						what += ", failover)"
					}
				}
				fmt.Fprintf(&b, "  %4d %s\n", n, what)
			}
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
	for _, k := range slices.Sorted(maps.Keys(m)) {
		fmt.Fprintf(b, "  %7d  %s\n", m[k], k)
	}
	if len(m) == 0 {
		b.WriteString("  (none)\n")
	}
}
