package chaos

import (
	"context"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/syncguard/syncguard-go/tests/pgtest/history"
	"github.com/syncguard/syncguard-go/tests/pgtest/linear"
)

// FaultRecord is what happened to one fault.
type FaultRecord struct {
	Fault
	Start, End time.Time
	Detail     string
	// Recovery is, per adapter, the time from the fault's end until the
	// first operation started after the end succeeded (-1: never).
	Recovery map[string]time.Duration
}

// Report is the outcome of a Run.
type Report struct {
	Seed       uint64
	Violations []history.Violation
	Stats      history.CheckStats
	Faults     []FaultRecord
	Ops        map[string]int64 // "adapter op outcome" -> count
	Errors     map[string]int64 // "adapter code sqlstate" -> count
	MaxLatency map[string]time.Duration
	Resource   ResourceStats
	Leaks      string // summary of the leak check
	Holdings   int
	History    *history.History
	Samples    []Sample
	// Linear is the linearizability checker's verdict (nil: not checked,
	// a run with CompactHistory).
	Linear *linear.Result
}

// Sample is one measurement of a soak run.
type Sample struct {
	At        time.Duration
	HeapAlloc uint64 // bytes live after a GC
	// Heap splits the live heap between the library (syncguard, adapters,
	// drivers, database/sql) and the harness (workers, the checker's
	// history), from the heap profile (memattr.go).
	Heap           HeapSplit
	Goroutines     int
	Open           map[string]int // adapter -> db.Stats().OpenConnections
	ServerSessions int            // pg_stat_activity sessions of the pools
	Holdings       int            // holdings so far
	Retained       int            // holdings the checker keeps in memory (see Options.CompactHistory)
}

// Summary formats the report for a test log.
func (r *Report) Summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d: %d holdings, %d hand-offs checked (%d after release, %d after expiry), closest hand-off %d ms after the release was sent or the expiry+tolerance passed\n",
		r.Seed, r.Stats.Holdings, r.Stats.Pairs, r.Stats.HandoffsByRelease, r.Stats.HandoffsByExpiry, r.Stats.MinGapMs)
	fmt.Fprintf(&b, "fenced resource: %d writes accepted, %d in-belief writes rejected; zombie writes after loss: %d rejected, %d accepted (no newer holder yet)\n",
		r.Resource.Accepted, r.Resource.RejectedInBelief, r.Resource.ZombieRejected, r.Resource.ZombieAccepted)
	r.Resource.txLine(&b)
	if r.Linear != nil {
		b.WriteString(r.Linear.Line() + "\n")
	}
	b.WriteString("faults (recovery = first success of an operation started after the fault ended):\n")
	for _, f := range r.Faults {
		var rec []string
		for _, a := range []string{"pq", "pgx"} {
			d, ok := f.Recovery[a]
			switch {
			case !ok:
			case d < 0:
				rec = append(rec, a+"=never")
			default:
				rec = append(rec, fmt.Sprintf("%s=%dms", a, d.Milliseconds()))
			}
		}
		fmt.Fprintf(&b, "  %7.1fs %-22s lasted %6dms  recovery %s  %s\n", f.At.Seconds(), f.Fault.String(),
			f.End.Sub(f.Start).Milliseconds(), strings.Join(rec, " "), f.Detail)
	}
	b.WriteString("operations:\n")
	for _, k := range slices.Sorted(maps.Keys(r.Ops)) {
		fmt.Fprintf(&b, "  %-40s %d\n", k, r.Ops[k])
	}
	b.WriteString("errors by adapter, code, SQLSTATE:\n")
	for _, k := range slices.Sorted(maps.Keys(r.Errors)) {
		fmt.Fprintf(&b, "  %-40s %d\n", k, r.Errors[k])
	}
	b.WriteString("max latency:\n")
	for _, k := range slices.Sorted(maps.Keys(r.MaxLatency)) {
		fmt.Fprintf(&b, "  %-40s %v\n", k, r.MaxLatency[k].Round(time.Millisecond))
	}
	b.WriteString("leaks: " + r.Leaks + "\n")
	return b.String()
}

func (r *runner) sample(ctx context.Context, start time.Time) Sample {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	smp := Sample{At: time.Since(start), HeapAlloc: ms.HeapAlloc, Heap: heapSplit(), Goroutines: runtime.NumGoroutine(), Open: map[string]int{}}
	for _, a := range r.adapt {
		smp.Open[a.name] = a.db.Stats().OpenConnections
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_ = r.admin.QueryRowContext(cctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = ANY($1)`, r.appNames()).Scan(&smp.ServerSessions)
	smp.Holdings, smp.Retained = r.hist.Begun(), r.hist.Retained()
	return smp
}

func (r *runner) computeRecovery() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for a, s := range r.successes {
		sort.Slice(s, func(i, j int) bool { return s[i][1].Before(s[j][1]) })
		r.successes[a] = s
	}
	for i := range r.faults {
		f := &r.faults[i]
		f.Recovery = map[string]time.Duration{}
		for _, a := range r.adapt {
			d := time.Duration(-1)
			for _, s := range r.successes[a.name] {
				if !s[0].Before(f.End) {
					d = s[1].Sub(f.End)
					break
				}
			}
			f.Recovery[a.name] = d
			// A later fault that began within the 10 s takes over the
			// judging: its own recovery is a success after this one's too.
			overtaken := i+1 < len(r.faults) && r.faults[i+1].Start.Before(f.End.Add(10*time.Second))
			if (d < 0 || d > 10*time.Second) && !overtaken {
				r.violations = append(r.violations, history.Violation{Rule: "operations succeed again within 10 s of the end of a fault",
					Detail: fmt.Sprintf("%s after %s at %v: recovery %v", a.name, f.Fault, f.At, d)})
			}
		}
	}
}
