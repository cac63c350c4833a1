package chaos

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/syncguard/syncguard-go/tests/pgtest"
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
	// A fine-grained heap profile, so that each sample can split the live
	// heap between the library and the harness (memattr.go).
	runtime.MemProfileRate = 4096
	opts := Options{
		Duration: d, Schedule: []Fault{}, Keys: 4, RawWorkers: 1, HelperWorkers: 3, WithLockWorkers: 3,
		MaxOpenConns: 4, TTL: time.Second, SampleEvery: max(d/40, 5*time.Second), NoEventLog: true, CompactHistory: true, Logf: t.Logf,
	}
	if os.Getenv("SYNCGUARD_SOAK_COMPACT") == "0" {
		// The checker keeps every holding, as before History.Compact: for
		// comparing the split of the heap (docs/fault-suite.md).
		opts.CompactHistory = false
	}
	rep := runReported(t, srv, opts, "soak")
	s := rep.Samples
	if len(s) < 6 {
		t.Fatalf("only %d samples", len(s))
	}
	var b strings.Builder
	b.WriteString("      t   heap(KiB)  library(KiB)  harness(KiB)  goroutines  open(pq,pgx)  server sessions  holdings (kept)\n")
	for _, x := range s {
		fmt.Fprintf(&b, "  %5.0fs  %9d  %12d  %12d  %10d  %5d,%-5d  %15d  %8d (%d)\n", x.At.Seconds(), x.HeapAlloc/1024,
			x.Heap.Library/1024, x.Heap.Harness/1024, x.Goroutines, x.Open["pq"], x.Open["pgx"], x.ServerSessions, x.Holdings, x.Retained)
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
	// The library's part on its own, so that a leak there cannot hide in
	// the harness's bookkeeping (or the other way round).
	lib := func(x Sample) float64 { return float64(x.Heap.Library) }
	harness := func(x Sample) float64 { return float64(x.Heap.Harness) }
	if h1, h2 := peak(first, lib), peak(last, lib); h2 > h1*1.25+1<<20 {
		t.Errorf("rule: the library's heap stays flat; peak %.0f KiB early, %.0f KiB late", h1/1024, h2/1024)
	}
	if h1, h2 := peak(first, harness), peak(last, harness); h2 > h1*1.25+1<<20 {
		t.Errorf("rule: the checker's heap stays bounded (CompactHistory); peak %.0f KiB early, %.0f KiB late", h1/1024, h2/1024)
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
