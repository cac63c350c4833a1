package oteltest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/syncguard/syncguard-go/otelsyncguard"
	"github.com/syncguard/syncguard-go/syncguard"
	"github.com/syncguard/syncguard-go/syncguardtest"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// polling retries every 100 ms exactly: with the fake backend and the
// bubble's clock the wait is known to the tick.
var polling = &syncguard.LockOptions{TTL: time.Minute, Acquisition: syncguard.AcquisitionOptions{
	RetryDelay: 100 * time.Millisecond, Backoff: "fixed", Jitter: "none", Timeout: 10 * time.Second}}

func nop(context.Context, *syncguard.Lease) error { return nil }

// A WithLock that waits for a holder waits in the key's queue through the
// wrapper (its Queue), is handed the key at the holder's release, and
// records, as its wait, the holder's hold time; the holder's hold is
// recorded exactly; attempts, the waiter's included, are counted by
// outcome and on the waiter's span, whose children they are.
func TestContendedWithLock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		r := newRig(t, syncguardtest.New())
		const hold = 3050 * time.Millisecond
		acquired, holderDone := make(chan struct{}), make(chan error)
		go func() {
			holderDone <- r.WithLock(ctx, "jobs:report", func(context.Context, *syncguard.Lease) error {
				close(acquired)
				time.Sleep(hold)
				return nil
			}, &syncguard.LockOptions{TTL: time.Minute})
		}()
		<-acquired
		synctest.Wait()
		if got := r.collect(t).int("syncguard.locks.held"); got != 1 {
			t.Fatalf("syncguard.locks.held while the holder holds = %d, want 1", got)
		}

		// The waiter starts 1 ms after the holder: its span is then told
		// from the holder's by its start (under synctest both would start
		// at the same instant, and the one found would depend on the order
		// the spans ended in).
		time.Sleep(time.Millisecond)
		start := time.Now()
		if err := r.WithLock(ctx, "jobs:report", nop, polling); err != nil {
			t.Fatal(err)
		}
		waited := time.Since(start)
		if err := <-holderDone; err != nil {
			t.Fatal(err)
		}
		if waited != hold-time.Millisecond {
			t.Fatalf("waited %v for a holder that held %v from 1 ms before, want %v: the release hands the key to the queued waiter", waited, hold, hold-time.Millisecond)
		}
		synctest.Wait() // the "hold" events are queued when the leases end
		c := r.collect(t)

		w := c.hist("syncguard.wait.duration", "syncguard.outcome=acquired")
		if w.Count != 2 || w.Sum != waited.Seconds() {
			t.Errorf("wait.duration{acquired}: count %d sum %gs, want 2 waits summing to the waiter's %gs (the holder waited 0)\n%s", w.Count, w.Sum, waited.Seconds(), c.dump())
		}
		h := c.hist("syncguard.hold.duration", "syncguard.outcome=released")
		if h.Count != 2 || h.Sum != hold.Seconds() {
			t.Errorf("hold.duration{released}: count %d sum %gs, want 2 holdings summing to %gs (the waiter held 0)", h.Count, h.Sum, hold.Seconds())
		}
		if got := c.int("syncguard.locks.held"); got != 0 {
			t.Errorf("syncguard.locks.held after both = %d, want 0", got)
		}

		// The waiter's span counts its attempts; they are its children.
		var waiter sdktrace.ReadOnlySpan
		children := map[trace.SpanID][]sdktrace.ReadOnlySpan{}
		for _, s := range r.spans.Ended() {
			children[s.Parent().SpanID()] = append(children[s.Parent().SpanID()], s)
			if s.Name() == "syncguard.with_lock" && s.StartTime().Equal(start) {
				waiter = s
			}
		}
		if waiter == nil {
			t.Fatal("no syncguard.with_lock span started when the waiter started")
		}
		n, _ := spanAttr(waiter, "syncguard.attempts")
		attempts := n.AsInt64()
		// Queued behind a live lock, the waiter retries every 100 ms for
		// the first 2 s of its wait only (0 to 2.1 s: 22 attempts), then
		// waits for its cues: the release wakes it (one more).
		if want := int64(2*time.Second/(100*time.Millisecond)) + 3; attempts != want {
			t.Errorf("waiter's syncguard.attempts = %d, want %d (one every 100 ms from 0 to 2.1 s, its first 2 s of retries, and the one the release woke, at %v)", attempts, want, hold)
		}
		var acquires, releases int64
		for _, s := range children[waiter.SpanContext().SpanID()] {
			if db, _ := spanAttr(s, "db.system.name"); db.AsString() != "postgresql" || s.SpanKind() != trace.SpanKindClient {
				t.Errorf("child span %s: db.system.name %q, kind %v; want postgresql, client", s.Name(), db.AsString(), s.SpanKind())
			}
			switch s.Name() {
			case "syncguard.acquire":
				acquires++
			case "syncguard.release":
				releases++
			}
		}
		if acquires != attempts || releases != 1 {
			t.Errorf("waiter's span has %d acquire and %d release children, want %d and 1", acquires, releases, attempts)
		}
		if got := c.int("syncguard.acquire.attempts", "syncguard.outcome=contended"); got != attempts-1 {
			t.Errorf("acquire.attempts{contended} = %d, want %d", got, attempts-1)
		}
		if got := c.int("syncguard.acquire.attempts", "syncguard.outcome=acquired"); got != 2 {
			t.Errorf("acquire.attempts{acquired} = %d, want 2", got)
		}
		if got := c.hist("syncguard.acquire.duration", "syncguard.outcome=contended").Count; got != uint64(attempts-1) {
			t.Errorf("acquire.duration{contended} count = %d, want %d", got, attempts-1)
		}
		if got := c.int("syncguard.releases", "syncguard.outcome=ok"); got != 2 {
			t.Errorf("releases{ok} = %d, want 2", got)
		}
	})
}

// A lease that loses its lock counts one loss, with why, however many
// operations notice it afterwards.
func TestLostLeaseCountsOneLoss(t *testing.T) {
	t.Run("gone, noticed by auto-extension", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			locks := syncguardtest.New()
			r := newRig(t, locks)
			err := r.WithLock(context.Background(), "jobs:report", func(ctx context.Context, lease *syncguard.Lease) error {
				locks.Delete(lease.LockID()) // an operator's DELETE
				<-ctx.Done()                 // auto-extension finds it gone
				return context.Cause(ctx)
			}, &syncguard.LockOptions{TTL: time.Minute, AutoExtend: true})
			if !errors.Is(err, syncguard.ErrLockLost) {
				t.Fatalf("WithLock = %v, want ErrLockLost", err)
			}
			synctest.Wait()
			c := r.collect(t)
			if got := c.int("syncguard.losses", "syncguard.loss.reason=gone"); got != 1 {
				t.Errorf("losses{gone} = %d, want 1\n%s", got, c.dump())
			}
			assertOneLoss(t, c)
			if got := c.int("syncguard.extends", "syncguard.outcome=failed", "syncguard.reason=not-found"); got != 1 {
				t.Errorf("extends{failed, not-found} = %d, want 1", got)
			}
			if got := c.int("syncguard.releases", "syncguard.outcome=failed", "syncguard.reason=not-found"); got != 1 {
				t.Errorf("releases{failed, not-found} = %d, want 1 (the release after the loss)", got)
			}
			span := lastSpan(t, r, "syncguard.with_lock")
			if v, _ := spanAttr(span, "syncguard.loss.reason"); v.AsString() != "gone" || span.Status().Code != codes.Error {
				t.Errorf("with_lock span: loss.reason %q, status %v; want gone, Error", v.AsString(), span.Status())
			}
			if !hasEvent(span, "lost") {
				t.Error("with_lock span has no event lost")
			}
		})
	})
	t.Run("expired, found by an extend", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			locks := syncguardtest.New()
			r := newRig(t, locks)
			err := r.WithLock(context.Background(), "jobs:report", func(ctx context.Context, lease *syncguard.Lease) error {
				locks.Expire(lease.LockID())
				_, err := lease.Extend(ctx, time.Minute)
				return err
			}, &syncguard.LockOptions{TTL: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			synctest.Wait()
			c := r.collect(t)
			if got := c.int("syncguard.losses", "syncguard.loss.reason=expired"); got != 1 {
				t.Errorf("losses{expired} = %d, want 1\n%s", got, c.dump())
			}
			assertOneLoss(t, c)
		})
	})
	t.Run("gone, found by the release", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			locks := syncguardtest.New()
			r := newRig(t, locks)
			err := r.WithLock(context.Background(), "jobs:report", func(ctx context.Context, lease *syncguard.Lease) error {
				locks.Delete(lease.LockID()) // nothing notices until the release
				return nil
			}, &syncguard.LockOptions{TTL: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			synctest.Wait()
			c := r.collect(t)
			if got := c.int("syncguard.losses", "syncguard.loss.reason=gone"); got != 1 {
				t.Errorf("losses{gone} = %d, want 1 (the release found it gone)\n%s", got, c.dump())
			}
			assertOneLoss(t, c)
		})
	})
	t.Run("not extended: outlived its TTL without auto-extension", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			r := newRig(t, syncguardtest.New())
			err := r.WithLock(context.Background(), "jobs:report", func(ctx context.Context, lease *syncguard.Lease) error {
				time.Sleep(2 * time.Minute) // outlives its TTL; the release then finds it expired
				return nil
			}, &syncguard.LockOptions{TTL: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			synctest.Wait()
			c := r.collect(t)
			if got := c.int("syncguard.losses", "syncguard.loss.reason=not_extended"); got != 1 {
				t.Errorf("losses{not_extended} = %d, want 1\n%s", got, c.dump())
			}
			assertOneLoss(t, c)
			if got := c.int("syncguard.releases", "syncguard.outcome=failed", "syncguard.reason=expired"); got != 1 {
				t.Errorf("releases{failed, expired} = %d, want 1", got)
			}
		})
	})
	t.Run("not extended, Lock", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			locks := syncguardtest.New()
			r := newRig(t, locks)
			lease, err := r.Lock(context.Background(), "jobs:report", &syncguard.LockOptions{TTL: time.Minute, AutoExtend: true})
			if err != nil {
				t.Fatal(err)
			}
			locks.Fail(syncguardtest.OpExtend, syncguard.ErrServiceUnavailable, -1) // an outage
			<-lease.Done()
			locks.Fail(syncguardtest.OpExtend, "", 0)
			lease.Close()
			synctest.Wait()
			c := r.collect(t)
			if got := c.int("syncguard.losses", "syncguard.loss.reason=not_extended"); got != 1 {
				t.Errorf("losses{not_extended} = %d, want 1\n%s", got, c.dump())
			}
			assertOneLoss(t, c)
			if got := c.int("syncguard.extends", "syncguard.outcome=error", "error.type=ServiceUnavailable"); got < 1 {
				t.Errorf("extends{error, ServiceUnavailable} = %d, want the failed attempts", got)
			}
			span := lastSpan(t, r, "syncguard.lock")
			if v, _ := spanAttr(span, "syncguard.loss.reason"); v.AsString() != "not_extended" {
				t.Errorf("lock span: loss.reason %q, want not_extended", v.AsString())
			}
			var extends int
			for _, s := range r.spans.Ended() {
				if s.Name() == "syncguard.extend" && s.Parent().SpanID() == span.SpanContext().SpanID() {
					extends++
				}
			}
			if extends == 0 {
				t.Error("the lease's automatic extends are not children of the lock span")
			}
		})
	})
}

func assertOneLoss(t *testing.T, c collected) {
	t.Helper()
	var total int64
	for _, why := range []string{"expired", "not_extended", "gone", "unknown"} {
		total += c.int("syncguard.losses", "syncguard.loss.reason="+why)
	}
	if total != 1 {
		t.Errorf("losses in all = %d, want 1", total)
	}
	if h := c.hist("syncguard.hold.duration", "syncguard.outcome=lost"); h.Count != 1 {
		t.Errorf("hold.duration{lost} count = %d, want 1", h.Count)
	}
	if got := c.int("syncguard.locks.held"); got != 0 {
		t.Errorf("locks.held = %d, want 0", got)
	}
}

func lastSpan(t *testing.T, r *rig, name string) sdktrace.ReadOnlySpan {
	t.Helper()
	var last sdktrace.ReadOnlySpan
	for _, s := range r.spans.Ended() {
		if s.Name() == name {
			last = s
		}
	}
	if last == nil {
		t.Fatalf("no %s span ended", name)
	}
	return last
}

func hasEvent(s sdktrace.ReadOnlySpan, name string) bool {
	for _, e := range s.Events() {
		if e.Name == name {
			return true
		}
	}
	return false
}

// Errors are counted and recorded with their code; a wait that gives up
// says how.
func TestErrorsAndTimeouts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		locks := syncguardtest.New()
		r := newRig(t, locks)
		locks.Fail(syncguardtest.OpAcquire, syncguard.ErrServiceUnavailable, 1)
		err := r.WithLock(ctx, "k", nop, &syncguard.LockOptions{Acquisition: syncguard.AcquisitionOptions{FailFast: true}})
		if syncguard.CodeOf(err) != syncguard.ErrServiceUnavailable {
			t.Fatalf("WithLock = %v, want ServiceUnavailable", err)
		}
		if err := locks.Contend("k", 1000); err != nil {
			t.Fatal(err)
		}
		err = r.WithLock(ctx, "k", nop, polling)
		if !errors.Is(err, syncguard.ErrAcquisitionTimeout) {
			t.Fatalf("WithLock = %v, want AcquisitionTimeout", err)
		}
		synctest.Wait()
		c := r.collect(t)
		if got := c.int("syncguard.acquire.attempts", "syncguard.outcome=error", "error.type=ServiceUnavailable"); got != 1 {
			t.Errorf("acquire.attempts{error, ServiceUnavailable} = %d, want 1\n%s", got, c.dump())
		}
		if got := c.hist("syncguard.wait.duration", "syncguard.outcome=error", "error.type=ServiceUnavailable").Count; got != 1 {
			t.Errorf("wait.duration{error, ServiceUnavailable} count = %d, want 1", got)
		}
		if h := c.hist("syncguard.wait.duration", "syncguard.outcome=timeout"); h.Count != 1 || h.Sum != 10 {
			t.Errorf("wait.duration{timeout}: count %d sum %g, want 1 wait of 10 s (the Timeout)", h.Count, h.Sum)
		}
		if got := c.int("syncguard.acquire.attempts", "syncguard.outcome=contended"); got != 100 {
			t.Errorf("acquire.attempts{contended} = %d, want 100 (every 100 ms until the 10 s Timeout)", got)
		}
		var sawError, sawTimeout bool
		for _, s := range r.spans.Ended() {
			if s.Name() != "syncguard.with_lock" {
				continue
			}
			outcome, _ := spanAttr(s, "syncguard.outcome")
			code, _ := spanAttr(s, "error.type")
			switch {
			case outcome.AsString() == "error" && code.AsString() == "ServiceUnavailable" && s.Status().Code == codes.Error:
				sawError = true
			case outcome.AsString() == "timeout" && code.AsString() == "AcquisitionTimeout" && s.Status().Code == codes.Error:
				sawTimeout = true
			}
		}
		if !sawError || !sawTimeout {
			t.Errorf("with_lock spans: error recorded %v, timeout recorded %v; want both", sawError, sawTimeout)
		}
	})
}

// Keys never become attributes; WithKeyLabel's label does.
func TestKeysStayOutOfTelemetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		for _, label := range []bool{false, true} {
			var opts []otelsyncguard.Option
			if label {
				opts = append(opts, otelsyncguard.WithKeyLabel(func(key string) string {
					job, _, _ := strings.Cut(key, ":")
					return job
				}))
			}
			r := newRig(t, syncguardtest.New(), opts...)
			if err := r.WithLock(ctx, "billing:tenant-secret-42", nop, nil); err != nil {
				t.Fatal(err)
			}
			synctest.Wait()
			c := r.collect(t)
			dump := c.dump()
			for _, s := range r.spans.Ended() {
				for _, a := range s.Attributes() {
					dump += string(a.Key) + "=" + a.Value.Emit() + "\n"
				}
			}
			if strings.Contains(dump, "secret") {
				t.Errorf("label %v: the key appears in the telemetry:\n%s", label, dump)
			}
			want := int64(0)
			if label {
				want = 1
			}
			if got := c.int("syncguard.acquire.attempts", "syncguard.outcome=acquired", "syncguard.lock.label=billing"); got != want {
				t.Errorf("label %v: acquire.attempts{acquired, label=billing} = %d, want %d\n%s", label, got, want, dump)
			}
		}
	})
}

// The instrumentation scope is the module; WithAttributes reaches every
// point and span.
func TestScopeAndAttributes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, syncguardtest.New(), otelsyncguard.WithAttributes(attributeDB))
		if err := r.WithLock(context.Background(), "k", nop, nil); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		c := r.collect(t)
		for _, sm := range c.rm.ScopeMetrics {
			if sm.Scope.Name != otelsyncguard.ScopeName {
				t.Errorf("meter scope %q, want %q", sm.Scope.Name, otelsyncguard.ScopeName)
			}
		}
		if got := c.int("syncguard.acquire.attempts", "syncguard.outcome=acquired", "db.namespace=orders"); got != 1 {
			t.Errorf("acquire.attempts{acquired, db.namespace=orders} = %d, want 1\n%s", got, c.dump())
		}
		for _, s := range r.spans.Ended() {
			if s.InstrumentationScope().Name != otelsyncguard.ScopeName {
				t.Errorf("span %s scope %q", s.Name(), s.InstrumentationScope().Name)
			}
			if v, _ := spanAttr(s, "db.namespace"); v.AsString() != "orders" {
				t.Errorf("span %s lacks db.namespace=orders", s.Name())
			}
		}
	})
}
