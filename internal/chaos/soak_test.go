package chaos

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/syncguard/syncguard-go/internal/pgtest"
)

// TestSoak runs auto-extended leases (syncguard.Lock with AutoExtend),
// WithLock critical sections and raw Backend workers on both adapters
// under steady contention, without faults, and checks that heap,
// goroutines and connections stay flat. It runs only when
// SYNCGUARD_SOAK_DURATION is set (`make soak` sets 10m); the invariants of
// TestChaos are checked too.
func TestSoak(t *testing.T) {
	d := envDuration(t, "SYNCGUARD_SOAK_DURATION")
	if d <= 0 {
		t.Skip("set SYNCGUARD_SOAK_DURATION (e.g. 10m) to run the soak test (make soak)")
	}
	srv := pgtest.Require(t)
	opts := Options{
		Duration: d, Schedule: []Fault{}, Keys: 4, RawWorkers: 1, HelperWorkers: 3, WithLockWorkers: 3,
		MaxOpenConns: 4, TTL: time.Second, SampleEvery: max(d/40, 5*time.Second), NoEventLog: true, Logf: t.Logf,
	}
	rep, err := Run(context.Background(), srv, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("soak report:\n%s", rep.Summary())
	for _, v := range rep.Violations {
		t.Errorf("%s", v)
	}
	s := rep.Samples
	if len(s) < 6 {
		t.Fatalf("only %d samples", len(s))
	}
	var b strings.Builder
	b.WriteString("      t   heap(KiB)  goroutines  open(pq,pgx)  server sessions  holdings\n")
	for _, x := range s {
		fmt.Fprintf(&b, "  %5.0fs  %9d  %10d  %5d,%-5d  %15d  %8d\n", x.At.Seconds(), x.HeapAlloc/1024, x.Goroutines, x.Open["pq"], x.Open["pgx"], x.ServerSessions, x.Holdings)
	}
	t.Logf("samples:\n%s", b.String())

	// Flat: after a warm-up fifth, the last third stays within bounds of
	// the first third.
	warm := s[len(s)/5:]
	third := len(warm) / 3
	first, last := warm[:third], warm[len(warm)-third:]
	peak := func(xs []Sample, f func(Sample) float64) float64 {
		m := 0.0
		for _, x := range xs {
			m = max(m, f(x))
		}
		return m
	}
	heap := func(x Sample) float64 { return float64(x.HeapAlloc) }
	gor := func(x Sample) float64 { return float64(x.Goroutines) }
	if h1, h2 := peak(first, heap), peak(last, heap); h2 > h1*1.25+4<<20 {
		t.Errorf("rule: the heap stays flat; peak %.0f KiB early, %.0f KiB late", h1/1024, h2/1024)
	}
	if g1, g2 := peak(first, gor), peak(last, gor); g2 > g1+8 {
		t.Errorf("rule: goroutines stay flat; peak %.0f early, %.0f late", g1, g2)
	}
	for _, x := range s {
		for a, n := range x.Open {
			if n > opts.MaxOpenConns {
				t.Errorf("rule: a pool never opens more than MaxOpenConns; %s had %d at %v", a, n, x.At)
			}
		}
		if x.ServerSessions > 2*opts.MaxOpenConns {
			t.Errorf("rule: server sessions stay within the pools; %d at %v", x.ServerSessions, x.At)
		}
	}
	if last[len(last)-1].Holdings-first[0].Holdings < 100 {
		t.Errorf("the soak made too little progress: %d holdings", last[len(last)-1].Holdings-first[0].Holdings)
	}
}
