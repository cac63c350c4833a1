package otelsyncguard

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/syncguard/syncguard-go/syncguard"
	"github.com/syncguard/syncguard-go/syncguardtest"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
)

// events collects what WithOnEvent passes on.
type events struct {
	mu  sync.Mutex
	all []syncguard.LockEvent
}

func (e *events) add(ev syncguard.LockEvent) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.all = append(e.all, ev)
}

func (e *events) types() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for _, ev := range e.all {
		out = append(out, ev.Type)
	}
	return strings.Join(out, " ")
}

func wrapNoop(b syncguard.LockBackend, ev *events, opts ...Option) *Backend {
	return Wrap(b, append([]Option{
		WithMeterProvider(metricnoop.NewMeterProvider()),
		WithTracerProvider(tracenoop.NewTracerProvider()),
		WithOnEvent(ev.add),
	}, opts...)...)
}

// The wrapper is the telemetry sink syncguard.Lock looks for: the helper's
// "wait" and "hold" events reach the metrics through syncguard.WithLock as
// well as through the Backend's own WithLock.
func TestHelperEventsReachTheWrapper(t *testing.T) {
	ctx := context.Background()
	for name, withLock := range map[string]func(b *Backend, fn func(context.Context, *syncguard.Lease) error) error{
		"syncguard.WithLock": func(b *Backend, fn func(context.Context, *syncguard.Lease) error) error {
			return syncguard.WithLock(ctx, b, "jobs:a", fn, nil)
		},
		"Backend.WithLock": func(b *Backend, fn func(context.Context, *syncguard.Lease) error) error {
			return b.WithLock(ctx, "jobs:a", fn, nil)
		},
	} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var ev events
				b := wrapNoop(syncguardtest.New(), &ev)
				if err := withLock(b, func(context.Context, *syncguard.Lease) error { return nil }); err != nil {
					t.Fatal(err)
				}
				// The "hold" event is queued when the lease ends, from a
				// goroutine of its own: wait for it, then for the delivery.
				synctest.Wait()
				if err := b.Flush(ctx); err != nil {
					t.Fatal(err)
				}
				if got, want := ev.types(), "acquire wait release hold"; got != want {
					t.Fatalf("events = %q, want %q", got, want)
				}
			})
		})
	}
}

// Keys and lockIds never leave the wrapper raw, even when WithKeyLabel
// makes the wrapper read them.
func TestOnEventGetsNoRawValues(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		var ev events
		b := wrapNoop(syncguardtest.New(), &ev, WithKeyLabel(func(string) string { return "job" }))
		if err := b.WithLock(ctx, "tenant:7:secret", func(context.Context, *syncguard.Lease) error { return nil }, nil); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		b.Flush(ctx)
		ev.mu.Lock()
		defer ev.mu.Unlock()
		if len(ev.all) != 4 {
			t.Fatalf("%d events, want 4", len(ev.all))
		}
		for _, e := range ev.all {
			if e.Key != "" || e.LockID != "" {
				t.Errorf("%s event carries Key %q LockID %q", e.Type, e.Key, e.LockID)
			}
		}
	})
}

// lossReason names each way a lease loses its lock, read from the errors
// the lease really produces (a change of their wording fails here).
func TestLossReasonOfRealLeases(t *testing.T) {
	cases := map[string]func(t *testing.T, locks *syncguardtest.Backend, lease *syncguard.Lease){
		lossExpired: func(t *testing.T, locks *syncguardtest.Backend, lease *syncguard.Lease) {
			locks.Expire(lease.LockID())
			lease.Extend(context.Background(), time.Minute)
		},
		lossGone: func(t *testing.T, locks *syncguardtest.Backend, lease *syncguard.Lease) {
			locks.Delete(lease.LockID())
			lease.Extend(context.Background(), time.Minute)
		},
		lossNotExtended: func(t *testing.T, locks *syncguardtest.Backend, lease *syncguard.Lease) {
			locks.Fail(syncguardtest.OpExtend, syncguard.CodeServiceUnavailable, -1)
			time.Sleep(2 * time.Minute) // the bubble's clock: past the guaranteed lifetime
		},
	}
	for want, lose := range cases {
		t.Run(want, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				locks := syncguardtest.New()
				lease, err := syncguard.Lock(context.Background(), locks, "k", &syncguard.LockOptions{TTL: time.Minute, AutoExtend: want == lossNotExtended})
				if err != nil {
					t.Fatal(err)
				}
				defer lease.Close()
				lose(t, locks, lease)
				synctest.Wait()
				cause := lease.Err()
				if !errors.Is(cause, syncguard.ErrLockLost) {
					t.Fatalf("lease.Err() = %v, want a loss", cause)
				}
				if got := lossReason(cause); got != want {
					t.Fatalf("lossReason(%q) = %q, want %q", cause, got, want)
				}
			})
		})
	}
	if got := lossReason(syncguard.ErrLeaseReleased); got != lossUnknown {
		t.Errorf("lossReason(ErrLeaseReleased) = %q, want %q", got, lossUnknown)
	}
}

// Attempts are counted for the span of Lock even when the tracer records
// nothing, and stop being counted once the lock is held.
func TestAttemptsStopAtAcquisition(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		locks := syncguardtest.New()
		var ev events
		b := wrapNoop(locks, &ev)
		if err := locks.Contend("k", 2); err != nil {
			t.Fatal(err)
		}
		a := &attempts{}
		err := syncguard.WithLock(context.WithValue(ctx, attemptsKey{}, a), b, "k", func(ctx context.Context, _ *syncguard.Lease) error {
			a.done.Store(true) // as Backend.WithLock's fn wrapper does
			_, err := b.Acquire(ctx, "other", time.Minute)
			return err
		}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := a.n.Load(); got != 3 {
			t.Fatalf("attempts = %d, want 3 (two contended, one acquired; fn's acquire not counted)", got)
		}
	})
}

func TestWrapWithoutProvidersUsesTheGlobalOnes(t *testing.T) {
	b := Wrap(syncguardtest.New())
	defer b.Close()
	if err := b.WithLock(context.Background(), "k", func(context.Context, *syncguard.Lease) error { return nil }, nil); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
}
