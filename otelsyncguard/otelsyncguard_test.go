package otelsyncguard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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

// Each way a lease loses its lock gets the same syncguard.loss.reason on
// the metrics (from the "hold" event's LossReason) and on the span of the
// Backend's Lock (from the extend that ended the lease, or none).
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
				ctx := context.Background()
				locks := syncguardtest.New()
				var ev events
				b := wrapNoop(locks, &ev)
				c := &lockCall{Backend: b}
				lease, err := syncguard.Lock(ctx, c, "k", c.options(&syncguard.LockOptions{TTL: time.Minute, AutoExtend: want == lossNotExtended}))
				if err != nil {
					t.Fatal(err)
				}
				defer lease.Close()
				c.acquired(tracenoop.Span{}, lease, time.Now())
				lose(t, locks, lease)
				synctest.Wait()
				cause := lease.Err()
				if !errors.Is(cause, syncguard.ErrLockLost) {
					t.Fatalf("lease.Err() = %v, want a loss", cause)
				}
				if got := c.lossReason(cause); got != want {
					t.Errorf("span's loss reason of %q = %q, want %q", cause, got, want)
				}
				if err := b.Flush(ctx); err != nil {
					t.Fatal(err)
				}
				ev.mu.Lock()
				defer ev.mu.Unlock()
				var hold *syncguard.LockEvent
				for i := range ev.all {
					if ev.all[i].Type == syncguard.EventHold {
						hold = &ev.all[i]
					}
				}
				if hold == nil {
					t.Fatalf("no hold event in %d events", len(ev.all))
				}
				if got := lossValue(hold.LossReason); got != want {
					t.Errorf("metrics' loss reason of LossReason %q = %q, want %q", hold.LossReason, got, want)
				}
			})
		})
	}
	c := &lockCall{}
	if got := c.lossReason(syncguard.ErrLeaseReleased); got != lossUnknown {
		t.Errorf("lossReason(ErrLeaseReleased) = %q, want %q", got, lossUnknown)
	}
	if got := lossValue(""); got != lossUnknown {
		t.Errorf(`lossValue("") = %q, want %q`, got, lossUnknown)
	}
}

// The span's attempts are counted with LockOptions.OnAttempt, which
// still reaches the caller's own OnAttempt; the acquires fn makes are not
// attempts of the wait.
func TestAttemptsCountedByOnAttempt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		locks := syncguardtest.New()
		var ev events
		b := wrapNoop(locks, &ev)
		if err := locks.Contend("k", 2); err != nil {
			t.Fatal(err)
		}
		var mine []bool
		opts := &syncguard.LockOptions{OnAttempt: func(res syncguard.AcquireResult, err error) {
			mine = append(mine, err == nil && res.OK)
		}}
		c := &lockCall{Backend: b}
		err := syncguard.WithLock(ctx, c, "k", func(ctx context.Context, _ *syncguard.Lease) error {
			_, err := b.Acquire(ctx, "other", time.Minute)
			return err
		}, c.options(opts))
		if err != nil {
			t.Fatal(err)
		}
		if c.attempts != 3 {
			t.Errorf("attempts = %d, want 3 (two contended, one acquired; fn's acquire not counted)", c.attempts)
		}
		if fmt.Sprint(mine) != "[false false true]" {
			t.Errorf("the caller's OnAttempt saw %v, want [false false true]", mine)
		}
		if opts.OnAttempt == nil || len(mine) != 3 {
			t.Fatal("the caller's options were changed")
		}

		// The same through the Backend's own WithLock and Lock.
		mine = nil
		if err := locks.Contend("k", 1); err != nil {
			t.Fatal(err)
		}
		if err := b.WithLock(ctx, "k", func(context.Context, *syncguard.Lease) error { return nil }, opts); err != nil {
			t.Fatal(err)
		}
		lease, err := b.Lock(ctx, "k", opts)
		if err != nil {
			t.Fatal(err)
		}
		lease.Close()
		if fmt.Sprint(mine) != "[false true true]" {
			t.Errorf("the caller's OnAttempt through Backend.WithLock and Lock saw %v, want [false true true]", mine)
		}
	})
}

// A Backend is a Queuer that forwards Queue: Lock waits in the key's queue
// through it, and polls when the wrapped backend has no queue.
func TestQueueIsForwarded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		locks := syncguardtest.New()
		var ev events
		b := wrapNoop(locks, &ev)
		if w := b.Queue("k", "", true); w == nil {
			t.Fatal("Queue on a syncguardtest backend = nil, want its waiter")
		}
		noQueue := wrapNoop(struct{ syncguard.LockBackend }{locks}, &ev)
		if w := noQueue.Queue("k", "", true); w != nil {
			t.Fatalf("Queue on a backend without one = %T, want nil", w)
		}
		for _, lb := range []*Backend{b, noQueue} {
			if err := locks.Contend("q", 1); err != nil {
				t.Fatal(err)
			}
			if err := lb.WithLock(ctx, "q", func(context.Context, *syncguard.Lease) error { return nil }, nil); err != nil {
				t.Fatal(err)
			}
		}
		synctest.Wait()
		if err := b.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if err := noQueue.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		ev.mu.Lock()
		defer ev.mu.Unlock()
		acquires := 0
		for _, e := range ev.all {
			if e.Type == syncguard.EventAcquire {
				acquires++
			}
		}
		if acquires != 4 {
			t.Errorf("%d acquire events, want 4 (a contended and a successful attempt per wait, queued or polling)", acquires)
		}
	})
}

// Through Unwrap, syncguard.As finds the wrapped backend's capabilities:
// the telemetry sink of Lock (see TestHelperEventsReachTheWrapper), the
// lease logger, NotificationStatus when it has one.
func TestAsFindsThroughTheWrapper(t *testing.T) {
	locks := syncguardtest.New()
	b := wrapNoop(locks, &events{})
	if got, ok := syncguard.As[*syncguard.TelemetryBackend](b); !ok || got != b.Unwrap() {
		t.Errorf("As[*TelemetryBackend] = %v, %v; want b.Unwrap()", got, ok)
	}
	if got, ok := syncguard.As[*syncguardtest.Backend](b); !ok || got != locks {
		t.Errorf("As[*syncguardtest.Backend] = %v, %v; want the wrapped backend", got, ok)
	}
	if _, ok := syncguard.As[interface{ LeaseLogger() *slog.Logger }](&lockCall{Backend: b}); !ok {
		t.Error("the LeaseLogger of the wrapped backend is not found from a Lock call's Locker")
	}
	if _, ok := syncguard.As[notificationStatuser](b); ok {
		t.Error("found a NotificationStatus on a syncguardtest backend")
	}
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
