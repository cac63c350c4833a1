package otelsyncguard

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/syncguard/syncguard-go/syncguard"
	"github.com/syncguard/syncguard-go/syncguardtest"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
)

func newNoop(opts ...Option) *Tracer {
	return New(append([]Option{
		WithMeterProvider(metricnoop.NewMeterProvider()),
		WithTracerProvider(tracenoop.NewTracerProvider()),
	}, opts...)...)
}

// The metrics' loss reasons are the core's, not_extended spelled as
// dashboards read it; anything else is unknown.
func TestLossValue(t *testing.T) {
	for in, want := range map[string]string{"not-extended": "not_extended", "expired": "expired", "gone": "gone", "": "unknown", "new": "unknown"} {
		if got := lossValue(in); got != want {
			t.Errorf("lossValue(%q) = %q, want %q", in, got, want)
		}
	}
}

// Each operation's syncguard.outcome, reason and error.type.
func TestOutcome(t *testing.T) {
	down := &syncguard.Error{Code: syncguard.ErrServiceUnavailable}
	for _, tc := range []struct {
		op                    syncguard.TraceOp
		outcome, reason, code string
	}{
		{syncguard.TraceOp{Op: "acquire", OK: true}, "acquired", "", ""},
		{syncguard.TraceOp{Op: "acquire", Reason: syncguard.ReasonLocked}, "contended", "", ""},
		{syncguard.TraceOp{Op: "acquire", Err: down}, "error", "", "ServiceUnavailable"},
		{syncguard.TraceOp{Op: "release", Reason: syncguard.ReasonExpired}, "failed", "expired", ""},
		{syncguard.TraceOp{Op: "extend", OK: true}, "ok", "", ""},
		{syncguard.TraceOp{Op: "isLocked"}, "free", "", ""},
		{syncguard.TraceOp{Op: "lookup", OK: true}, "found", "", ""},
		{syncguard.TraceOp{Op: "lookup", Err: errors.New("other")}, "error", "", "_OTHER"},
	} {
		o, r, c := outcome(tc.op)
		if o != tc.outcome || r != tc.reason || c != tc.code {
			t.Errorf("outcome(%+v) = %q %q %q, want %q %q %q", tc.op, o, r, c, tc.outcome, tc.reason, tc.code)
		}
	}
}

// A key label that panics gives no label; the locks work on.
func TestPanickingKeyLabel(t *testing.T) {
	tr := newNoop(WithKeyLabel(func(string) string { panic("bad label") }))
	if got := tr.label("k"); got != "" {
		t.Errorf("label = %q, want none", got)
	}
	locks := syncguardtest.New()
	locks.SetTracer(tr)
	if err := syncguard.WithLock(context.Background(), locks, "k", func(context.Context, *syncguard.Lease) error { return nil }, nil); err != nil {
		t.Fatal(err)
	}
}

// statusLocker is a Locker with NotificationStatus, as *syncguard.Backend.
type statusLocker struct{ *syncguardtest.Backend }

func (statusLocker) NotificationStatus(context.Context) syncguard.NotificationStatus {
	return syncguard.NotificationStatus{}
}

// The polling metric is observed for the backend of the last contended
// attempt that has NotificationStatus, found from TraceOp.Locker.
func TestPollingFollowsTheContendedBackend(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := newNoop()
		defer tr.Close()
		locks := syncguardtest.New()
		locks.SetTracer(tr)
		if err := locks.Contend("k", 1); err != nil {
			t.Fatal(err)
		}
		nop := func(context.Context, *syncguard.Lease) error { return nil }
		if err := syncguard.WithLock(context.Background(), locks, "k", nop, nil); err != nil {
			t.Fatal(err)
		}
		if tr.m.ns != nil || tr.m.lastContended.Load() == 0 {
			t.Fatalf("after a contended attempt on the fake: ns %v, last %d; want none, set", tr.m.ns, tr.m.lastContended.Load())
		}
		if err := locks.Contend("k", 1); err != nil {
			t.Fatal(err)
		}
		if err := syncguard.WithLock(context.Background(), statusLocker{locks}, "k", nop, &syncguard.LockOptions{TTL: time.Minute}); err != nil {
			t.Fatal(err)
		}
		if _, ok := tr.m.ns.(statusLocker); !ok {
			t.Errorf("after a contended attempt on a Locker with NotificationStatus: ns %T", tr.m.ns)
		}
	})
}

func TestNewWithoutProvidersUsesTheGlobalOnes(t *testing.T) {
	tr := New()
	locks := syncguardtest.New()
	locks.SetTracer(tr)
	if err := syncguard.WithLock(context.Background(), locks, "k", func(context.Context, *syncguard.Lease) error { return nil }, nil); err != nil {
		t.Fatal(err)
	}
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
}
