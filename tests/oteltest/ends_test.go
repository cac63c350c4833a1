package oteltest

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/syncguard/syncguard-go/syncguardtest"
)

// An operation's span is ended on the caller's goroutine before the
// operation returns, with the time it returned as its end: a span recorder
// read right after the call sees it, without Flush.
func TestOperationSpansEndBeforeTheOperationReturns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		locks := syncguardtest.New()
		locks.SetLatency(3 * time.Millisecond)
		r := newRig(t, locks)
		start := time.Now()
		a, err := r.Acquire(ctx, "k", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		returned := time.Now()
		ended := r.spans.Ended()
		if len(ended) != 1 {
			t.Fatalf("%d spans ended when Acquire returned, want 1", len(ended))
		}
		if s := ended[0]; s.Name() != "syncguard.acquire" || !s.StartTime().Equal(start) || !s.EndTime().Equal(returned) {
			t.Errorf("span %q from %v to %v, want syncguard.acquire from %v to %v (when Acquire returned)", s.Name(), s.StartTime(), s.EndTime(), start, returned)
		}
		if _, err := r.Release(ctx, a.LockID); err != nil {
			t.Fatal(err)
		}
		if n := len(r.spans.Ended()); n != 2 {
			t.Fatalf("%d spans ended when Release returned, want 2", n)
		}
	})
}
