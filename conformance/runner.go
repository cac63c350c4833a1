package conformance

import (
	"context"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// A case is one property: a function of its environment, registered from
// an init function under "Group/Rule". A serial case (a server restart, say)
// never runs alongside the others of its run.
type testCase[E any] struct {
	name   string
	serial bool
	fn     func(e E)
}

// registry holds the cases of one tier, in registration order.
type registry[E any] struct{ cases []testCase[E] }

func (r *registry[E]) add(name string, serial bool, fn func(E)) {
	if !strings.Contains(name, "/") {
		panic("conformance: case name " + name + " is not Group/Rule")
	}
	r.cases = append(r.cases, testCase[E]{name: name, serial: serial, fn: fn})
}

// The three tiers. The backend tier holds the properties of any
// syncguard.LockBackend; the SQL tier those of the PostgreSQL backend on
// real tables (transactions, drivers, poolers, restarts, the reference
// layout); the advisory tier those of package advisory.
var (
	backendCases  registry[*env]
	sqlCases      registry[*sqlEnv]
	advisoryCases registry[*sqlEnv]
)

func register(name string, fn func(e *env))          { backendCases.add(name, false, fn) }
func registerSQL(name string, fn func(e *sqlEnv))    { sqlCases.add(name, false, fn) }
func registerSerial(name string, fn func(e *sqlEnv)) { sqlCases.add(name, true, fn) }
func registerAdvisory(name string, fn func(e *sqlEnv)) {
	advisoryCases.add(name, false, fn)
}

// runOptions are the knobs every entry point shares.
type runOptions struct {
	timeout time.Duration
	pace    *pace
	serial  bool
	groups  []string
}

// groups returns the group names of r in order, and the cases by group.
func (r *registry[E]) groups() ([]string, map[string][]testCase[E]) {
	by := map[string][]testCase[E]{}
	var order []string
	for _, c := range r.cases {
		g, _, _ := strings.Cut(c.name, "/")
		if _, ok := by[g]; !ok {
			order = append(order, g)
		}
		by[g] = append(by[g], c)
	}
	return order, by
}

// checkGroups fails t for every name in want that is no group of any of
// the registries' groups.
func checkGroups(t *testing.T, want []string, have ...[]string) {
	t.Helper()
	var all []string
	for _, h := range have {
		all = append(all, h...)
	}
	for _, g := range want {
		if !slices.Contains(all, g) {
			t.Errorf("conformance: Groups names %q, which is no case group (groups: %s)", g, strings.Join(all, ", "))
		}
	}
}

// runCases runs the cases of r as subtests Group/Rule of t. newEnv builds a
// case's environment on the case's own test goroutine, with the case's
// context.
//
// Unless o.serial, the groups run alongside each other as well as the
// cases within a group: most cases spend their time waiting (for an
// expiry, a TTL, a wake-up), and a group's slowest case no longer holds
// back the next group (on 2 cores the run took about twice as long with
// the groups one after another). go test's -parallel still bounds how
// many cases run at once. A serial case runs alone: it takes exclusive
// before it starts, every other case takes it shared.
func runCases[E any](t *testing.T, r *registry[E], o runOptions, newEnv func(t *testing.T, ctx context.Context) E) {
	t.Helper()
	order, by := r.groups()
	var exclusive sync.RWMutex
	for _, g := range order {
		if len(o.groups) > 0 && !slices.Contains(o.groups, g) {
			continue
		}
		t.Run(g, func(t *testing.T) {
			if !o.serial {
				t.Parallel()
			}
			for _, c := range by[g] {
				_, rule, _ := strings.Cut(c.name, "/")
				t.Run(rule, func(t *testing.T) {
					if o.serial || c.serial {
						exclusive.Lock()
						defer exclusive.Unlock()
					} else {
						t.Parallel()
						exclusive.RLock()
						defer exclusive.RUnlock()
					}
					runCase(t, c.name, o.timeout, o.pace, func(ctx context.Context) { c.fn(newEnv(t, ctx)) })
				})
			}
		})
	}
}

// hangGrace is how long a case may run past its deadline before the
// watchdog reports it while it still runs.
func hangGrace(timeout time.Duration) time.Duration { return min(5*time.Second, timeout/2) }

// runCase runs fn on the test goroutine, with a context that ends at the
// case's deadline: timeout (Harness.CaseTimeout, a bound for the reference
// machine) × the run's slowdown, pushed back, up to the cap, when the
// machine measures slower at the deadline than it did at the start. Every
// wait in a case and every lock operation honours that context, so a case
// that would hang instead fails, by its name, when its deadline passes,
// saying how slow the machine was. A case stuck in something that ignores
// its context is reported while it still runs (t.Errorf from the watchdog,
// with the goroutine stacks), so the report does not depend on it ever
// returning; the watchdog stops before runCase returns, so it can never
// report on a finished test (which would crash the test binary).
func runCase(t *testing.T, name string, timeout time.Duration, p *pace, fn func(ctx context.Context)) {
	t.Helper()
	ctx := newCaseContext(timeout, p)
	defer ctx.stop()
	done := make(chan struct{})
	watchdog := make(chan struct{})
	go func() {
		defer close(watchdog)
		<-ctx.Done()
		grace := time.NewTimer(hangGrace(timeout))
		defer grace.Stop()
		select {
		case <-done:
		case <-grace.C:
			buf := make([]byte, 1<<20)
			buf = buf[:runtime.Stack(buf, true)]
			t.Errorf("rule: every case ends by its deadline (%s); %s is still running %v after it, stuck in something that ignores its context. Goroutines:\n%s",
				ctx.budget(), name, hangGrace(timeout), buf)
		}
	}()
	defer func() {
		// Also after t.FailNow (runtime.Goexit) inside fn.
		if ctx.Err() == context.DeadlineExceeded {
			t.Errorf("rule: every case ends by its deadline (%s); %s", ctx.budget(), ctx.overrun(name))
		}
		close(done)
		ctx.stop()
		<-watchdog
	}()
	fn(ctx)
}
