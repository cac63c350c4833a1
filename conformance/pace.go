package conformance

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// SlowdownEnv is the environment variable that tells the suite how much
// slower than its reference machine this one is (a number ≥ 1), instead of
// the figure it measures at the start of a run: see Harness.Slowdown.
const SlowdownEnv = "SYNCGUARD_CONFORMANCE_SLOWDOWN"

// The reference machine: 2 cores, quiet, a local PostgreSQL 15, tests
// under -race. Its figures: the median round trip of SELECT 1 through
// database/sql (0.2 to 0.4 ms with pgx or lib/pq; the reference is
// generous, so that a database a network hop away counts as fast), and the
// wall time of the calibration loop (calibrate) on every P at once.
const (
	refRoundTrip   = time.Millisecond
	refCalibration = 10 * time.Millisecond
	calibrationN   = 5_000_000 // iterations of spin that take refCalibration on the reference
)

// maxSlowdown caps a measured slowdown: past it, a case's deadline is no
// longer a useful bound (30 s × 8 is 4 minutes). SlowdownEnv and
// Harness.Slowdown may go beyond it.
const maxSlowdown = 8

// ciSlowdownFloor is the least slowdown a CI job's deadlines get (InCI):
// a shared runner's load comes and goes, and a deadline too generous only
// delays the report of a real hang. The work the cases do is not scaled
// down for it.
const ciSlowdownFloor = 2

// pace is how slow this machine and server are, compared with the
// reference machine, as the run measured them (or as SlowdownEnv or
// Harness.Slowdown says). Deadlines and the suite's internal waits
// stretch by it; cases that repeat a race many times repeat it fewer
// times by it.
type pace struct {
	// work is the slowdown the cases' work and waits scale by (≥ 1);
	// deadline that of the case deadlines (≥ work: the CI floor).
	work, deadline float64
	// source says where work comes from: "measured", SlowdownEnv=…, or
	// Harness.Slowdown.
	source string
	// ci is the CI marker when the CI floor applied, else "".
	ci string
	// at the start of the run: the median round trip (0 when there is no
	// server, as for RunBackend) and the calibration loop's time as a
	// multiple of the reference.
	roundTrip time.Duration
	cpu       float64
	// probe, when set, times one round trip to the server (remeasure).
	probe func(ctx context.Context) (time.Duration, error)

	mu     sync.Mutex
	lastAt time.Time
	last   measurement
}

// measurement is one reading of the machine.
type measurement struct {
	roundTrip time.Duration
	cpu       float64
}

// factor is the slowdown a measurement amounts to: the larger of the two
// ratios, at least 1, at most maxSlowdown.
func (m measurement) factor() float64 {
	f := max(1, m.cpu, float64(m.roundTrip)/float64(refRoundTrip))
	return min(f, maxSlowdown)
}

func (m measurement) String() string {
	s := fmt.Sprintf("CPU calibration %.1f× the reference's %v", m.cpu, refCalibration)
	if m.roundTrip > 0 {
		s = fmt.Sprintf("round trip %.2f ms (reference %v), %s", float64(m.roundTrip)/1e6, refRoundTrip, s)
	}
	return s
}

// quickPace is the pace of a context that carries none (a helper called
// outside a run): the reference machine.
var quickPace = &pace{work: 1, deadline: 1, source: "none"}

// newPace works out the run's pace: fixed (Harness.Slowdown, then
// SlowdownEnv) or measured (with db, when not nil, for round trips).
// It fails t on a malformed setting.
func newPace(t *testing.T, fixed float64, db *sql.DB) *pace {
	t.Helper()
	p := &pace{}
	if db != nil {
		p.probe = func(ctx context.Context) (time.Duration, error) {
			start := time.Now()
			var one int
			err := db.QueryRowContext(ctx, `SELECT 1`).Scan(&one)
			return time.Since(start), err
		}
	}
	m := p.measure(context.Background(), 7, 5)
	p.roundTrip, p.cpu = m.roundTrip, m.cpu
	p.last, p.lastAt = m, time.Now()
	switch env := strings.TrimSpace(os.Getenv(SlowdownEnv)); {
	case fixed < 0 || fixed > 0 && fixed < 1:
		t.Fatalf("conformance: Harness.Slowdown is %v: want 0 (measure) or a factor ≥ 1", fixed)
	case fixed >= 1:
		p.work, p.source = fixed, "Harness.Slowdown"
	case env != "":
		f, err := strconv.ParseFloat(env, 64)
		if err != nil || f < 1 || math.IsInf(f, 0) {
			t.Fatalf("conformance: %s=%q: want a factor ≥ 1 (such as 2 or 3.5), or unset it to have the suite measure the machine", SlowdownEnv, env)
		}
		p.work, p.source = f, SlowdownEnv+"="+env
	default:
		p.work, p.source = m.factor(), "measured"
	}
	p.deadline = p.work
	if marker, ok := InCI(); ok && p.source == "measured" && p.deadline < ciSlowdownFloor {
		p.deadline, p.ci = ciSlowdownFloor, marker
	}
	return p
}

// measure reads the machine: the median of rtts round trips (when there is
// a probe) and of loops calibration loops.
func (p *pace) measure(ctx context.Context, rtts, loops int) measurement {
	var m measurement
	if p.probe != nil {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if _, err := p.probe(ctx); err == nil { // the connection
			var ds []time.Duration
			for range rtts {
				d, err := p.probe(ctx)
				if err != nil {
					break
				}
				ds = append(ds, d)
			}
			if len(ds) > 0 {
				slices.Sort(ds)
				m.roundTrip = ds[len(ds)/2]
			}
		}
	}
	var cs []time.Duration
	for range loops {
		cs = append(cs, calibrate())
	}
	slices.Sort(cs)
	m.cpu = float64(cs[len(cs)/2]) / float64(refCalibration)
	return m
}

// remeasure reads the machine again (at most once a second for all the
// cases that ask), for a case at its deadline.
func (p *pace) remeasure() measurement {
	p.mu.Lock()
	defer p.mu.Unlock()
	if time.Since(p.lastAt) > time.Second {
		p.last, p.lastAt = p.measure(context.Background(), 3, 3), time.Now()
	}
	return p.last
}

// calibrate runs the calibration loop on every P at once and returns the
// wall time: how long a fixed amount of CPU work takes on this machine
// now, with whatever else runs on it.
func calibrate() time.Duration {
	n := runtime.GOMAXPROCS(0)
	var wg sync.WaitGroup
	sums := make([]uint64, n)
	start := time.Now()
	for i := range n {
		wg.Go(func() { sums[i] = spin(calibrationN, uint64(i)+1) })
	}
	wg.Wait()
	d := time.Since(start)
	calibrationSink.Store(sums[0]) // (runs of the suite calibrate at once)
	return d
}

var calibrationSink atomic.Uint64

// spin is CPU work that touches no memory (so the race detector does not
// slow it down): n rounds of xorshift.
func spin(n int, x uint64) uint64 {
	for range n {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
	}
	return x
}

// String says how slow the machine is, for the log and for failures.
func (p *pace) String() string {
	m := measurement{roundTrip: p.roundTrip, cpu: p.cpu}
	s := fmt.Sprintf("slowdown %.1f (%s; this machine measured %s at the start of the run)", p.work, p.source, m)
	if p.ci != "" {
		s += fmt.Sprintf("; deadlines at least ×%d in CI (%s)", ciSlowdownFloor, p.ci)
	}
	return s
}

// scale stretches one of the suite's waits, a bound after which a case
// gives up, by the deadline slowdown.
func (p *pace) scale(d time.Duration) time.Duration {
	return time.Duration(float64(d) * p.deadline)
}

// kindCaseContext is a lock kind's case context: it ends after timeout ×
// the run's deadline slowdown (CPU measured at the start of the run, at
// least the CI floor in CI) and carries p for the case's waits.
func kindCaseContext(p *pace, timeout time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(context.Background(), p.scale(timeout))
	return context.WithValue(ctx, paceKey{}, p), cancel
}

// autoExtendTTL is the TTL of a case that checks that AutoExtend keeps a
// lease past its TTL: 3 s on the reference machine (a runner with both
// cores busy stalls an extend for a second), stretched by the deadline
// slowdown, so that only a lease that is never extended ends.
func autoExtendTTL(ctx context.Context) time.Duration { return paceOf(ctx).scale(3 * time.Second) }

// rounds is how many times a case repeats a race it repeats n times on the
// reference machine: n divided by the slowdown, at least least (enough for
// the case to still find a real bug).
func (p *pace) rounds(n, least int) int {
	return max(least, min(n, int(math.Ceil(float64(n)/p.work))))
}

// paceKey is the context key under which a case's context carries the
// run's pace.
type paceKey struct{}

// paceOf returns the pace ctx carries, or the reference machine's.
func paceOf(ctx context.Context) *pace {
	if p, ok := ctx.Value(paceKey{}).(*pace); ok {
		return p
	}
	return quickPace
}

// slow is the pace of the case's run.
func (e *env) slow() *pace { return paceOf(e.ctx) }
