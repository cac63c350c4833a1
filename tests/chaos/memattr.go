package chaos

import (
	"math"
	"runtime"
	"strings"
)

// Heap attribution for the soak run: which part of the live heap the
// library (syncguard, its adapters, the drivers, database/sql) holds, and
// which part the harness (this package: workers, the checker's history,
// the fenced resource). A leak in the library must not hide behind the
// checker's bookkeeping, nor the bookkeeping pass for a leak.
//
// It reads the runtime's heap profile (runtime.MemProfile), the data of
// `go tool pprof -inuse_space`: sampled allocations still live at the last
// GC, each with its allocation stack. An allocation belongs to the harness
// when the innermost frame of this repository's code on its stack is in
// tests/chaos, to the library otherwise (a syncguard or adapter frame,
// or no frame of ours: driver and database/sql goroutines).

const harnessPkg = "github.com/syncguard/syncguard-go/tests/chaos."

// HeapSplit is the live heap by owner, estimated from the heap profile.
type HeapSplit struct {
	Library, Harness uint64
}

// heapSplit estimates the live heap by owner. Call it after runtime.GC.
func heapSplit() HeapSplit {
	var recs []runtime.MemProfileRecord
	n, _ := runtime.MemProfile(nil, false)
	for {
		recs = make([]runtime.MemProfileRecord, n+50)
		var ok bool
		if n, ok = runtime.MemProfile(recs, false); ok {
			recs = recs[:n]
			break
		}
	}
	rate := float64(runtime.MemProfileRate)
	var s HeapSplit
	for i := range recs {
		r := &recs[i]
		objs, bytes := r.InUseObjects(), r.InUseBytes()
		if objs <= 0 || bytes <= 0 {
			continue
		}
		// Unsample as pprof does: an allocation of size b is sampled with
		// probability 1 - exp(-b/rate).
		if rate > 1 {
			avg := float64(bytes) / float64(objs)
			bytes = int64(float64(bytes) / (1 - math.Exp(-avg/rate)))
		}
		if harnessOwned(r.Stack()) {
			s.Harness += uint64(bytes)
		} else {
			s.Library += uint64(bytes)
		}
	}
	return s
}

// harnessOwned reports whether the innermost frame of this repository's
// code on stk is in the harness.
func harnessOwned(stk []uintptr) bool {
	frames := runtime.CallersFrames(stk)
	for {
		f, more := frames.Next()
		if strings.HasPrefix(f.Function, "github.com/syncguard/syncguard-go/") {
			return strings.HasPrefix(f.Function, harnessPkg)
		}
		if !more {
			return false
		}
	}
}
