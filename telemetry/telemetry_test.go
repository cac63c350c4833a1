package telemetry_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/syncguard/syncguard-go/syncguard"
	"github.com/syncguard/syncguard-go/syncguardtest"
	"github.com/syncguard/syncguard-go/telemetry"
)

// recorder collects events.
type recorder struct {
	mu     sync.Mutex
	events []telemetry.LockEvent
}

func (r *recorder) on(e telemetry.LockEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

func (r *recorder) all() []telemetry.LockEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]telemetry.LockEvent(nil), r.events...)
}

// traced returns a fake backend whose Tracer is a telemetry Tracer.
func traced(b *syncguardtest.Backend, opts telemetry.Options) (*syncguardtest.Backend, *telemetry.Tracer) {
	tr := telemetry.New(opts)
	b.SetTracer(tr)
	return b, tr
}

func captureLogger() (*slog.Logger, *syncBuffer) {
	buf := &syncBuffer{}
	return slog.New(slog.NewJSONHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug})), buf
}

// syncBuffer is a bytes.Buffer safe for concurrent use.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func flush(t *testing.T, tb *telemetry.Tracer) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := tb.Flush(ctx); err != nil {
		t.Fatalf("Flush: %v", err)
	}
}

func TestTelemetryEventPerOperation(t *testing.T) {
	b := syncguardtest.New()
	rec := &recorder{}
	_, tb := traced(b, telemetry.Options{OnEvent: rec.on})
	ctx := context.Background()
	const key = "user:42"

	a, _ := b.Acquire(ctx, key, time.Minute)
	_, _ = b.Acquire(ctx, key, time.Minute)
	_, _ = b.IsLocked(ctx, key)
	_, _ = b.LookupKey(ctx, key)
	_, _ = b.LookupID(ctx, a.LockID)
	_, _ = b.Extend(ctx, a.LockID, time.Minute)
	_, _ = b.Release(ctx, a.LockID)
	_, _ = b.Release(ctx, a.LockID)
	_, _ = b.Extend(ctx, a.LockID, time.Minute)
	_, _ = b.IsLocked(ctx, key)
	_, _ = b.LookupKey(ctx, key)
	o, _ := b.Acquire(ctx, "other", time.Minute)
	b.Expire(o.LockID)
	_, _ = b.Release(ctx, o.LockID)
	_, err := b.Acquire(ctx, "", time.Minute)
	flush(t, tb)

	kh, ih := syncguard.HashKey(key), syncguard.HashKey(a.LockID)
	want := []telemetry.LockEvent{
		{Type: "acquire", OK: true, KeyHash: kh, LockIDHash: ih},
		{Type: "acquire", KeyHash: kh, Reason: syncguard.ReasonLocked},
		{Type: "isLocked", OK: true, KeyHash: kh},
		{Type: "lookup", OK: true, KeyHash: kh},
		{Type: "lookup", OK: true, LockIDHash: ih},
		{Type: "extend", OK: true, LockIDHash: ih},
		{Type: "release", OK: true, LockIDHash: ih},
		{Type: "release", LockIDHash: ih, Reason: syncguard.ReasonNotFound},
		{Type: "extend", LockIDHash: ih, Reason: syncguard.ReasonNotFound},
		{Type: "isLocked", KeyHash: kh},
		{Type: "lookup", KeyHash: kh},
		{Type: "acquire", OK: true, KeyHash: syncguard.HashKey("other"), LockIDHash: syncguard.HashKey(o.LockID)},
		{Type: "release", LockIDHash: syncguard.HashKey(o.LockID), Reason: syncguard.ReasonExpired},
		{Type: "acquire", Err: err},
	}
	got := rec.all()
	if len(got) != len(want) {
		t.Fatalf("want %d events, got %d: %+v", len(want), len(got), got)
	}
	timed := 0
	for i := range want {
		if got[i].Duration > 0 {
			timed++
		}
		got[i].Duration = 0
		if got[i] != want[i] {
			t.Errorf("event %d:\nwant %+v\ngot  %+v", i, want[i], got[i])
		}
	}
	if timed < len(want)/2 {
		t.Errorf("rule: an operation's event carries its duration; %d of %d had one", timed, len(want))
	}
}

func TestTelemetryIncludeRaw(t *testing.T) {
	b := syncguardtest.New()
	ctx := context.Background()
	run := func(opts telemetry.Options) ([]telemetry.LockEvent, string) {
		rec := &recorder{}
		opts.OnEvent = rec.on
		_, tb := traced(b, opts)
		a, _ := b.Acquire(ctx, "raw", time.Minute)
		_, _ = b.Acquire(ctx, "raw", time.Minute)
		_, _ = b.Release(ctx, a.LockID)
		flush(t, tb)
		return rec.all(), a.LockID
	}

	evs, _ := run(telemetry.Options{})
	for _, e := range evs {
		if e.Key != "" || e.LockID != "" {
			t.Errorf("no raw values by default: %+v", e)
		}
	}
	evs, id := run(telemetry.Options{IncludeRaw: true})
	if evs[0].Key != "raw" || evs[0].LockID != id || evs[1].Key != "raw" || evs[2].LockID != id {
		t.Errorf("IncludeRaw adds the raw key and lockId: %+v", evs)
	}
	evs, id = run(telemetry.Options{IncludeRaw: true, IncludeRawFunc: func(e telemetry.LockEvent) bool {
		if e.Key != "" || e.LockID != "" {
			t.Error("the predicate sees the event without raw values")
		}
		return !e.OK
	}})
	if evs[0].Key != "" || evs[1].Key != "raw" || evs[2].LockID != "" {
		t.Errorf("IncludeRawFunc decides per event (only the failed acquire here): %+v, %s", evs, id)
	}
	evs, _ = run(telemetry.Options{IncludeRawFunc: func(telemetry.LockEvent) bool { panic("bad predicate") }})
	if len(evs) != 3 || evs[0].Key != "" {
		t.Errorf("a panicking predicate means no raw values, and events still flow: %+v", evs)
	}
}

func TestTelemetrySlowCallbackNeverDelaysOperations(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := syncguardtest.New()
		delivered := 0
		_, tb := traced(b, telemetry.Options{OnEvent: func(telemetry.LockEvent) {
			time.Sleep(time.Hour)
			delivered++
		}})
		start := time.Now()
		err := syncguard.WithLock(t.Context(), b, "k", func(context.Context, *syncguard.Lease) error { return nil }, nil)
		if err != nil || time.Since(start) != 0 {
			t.Fatalf("operations must not wait for OnEvent: took %v, err %v", time.Since(start), err)
		}
		if err := tb.Flush(t.Context()); err != nil {
			t.Fatal(err)
		}
		if delivered != 4 || time.Since(start) != 4*time.Hour {
			t.Fatalf("events are delivered in the background, one at a time: %d after %v", delivered, time.Since(start))
		}
	})
}

func TestTelemetryPanickingCallbackIsContained(t *testing.T) {
	b := syncguardtest.New()
	logger, buf := captureLogger()
	n := 0
	_, tb := traced(b, telemetry.Options{Logger: logger, OnEvent: func(e telemetry.LockEvent) {
		n++
		if e.Type == "acquire" {
			panic("callback bug")
		}
	}})
	err := syncguard.WithLock(context.Background(), b, "k", func(context.Context, *syncguard.Lease) error { return nil }, nil)
	flush(t, tb)
	if err != nil || n != 4 {
		t.Fatalf("a panicking OnEvent breaks nothing: err %v, %d events delivered (want acquire, wait, release, hold)", err, n)
	}
	if !strings.Contains(buf.String(), "callback bug") {
		t.Errorf("the panic is logged: %s", buf.String())
	}
}

func TestTelemetryDropsAndCountsWhenFull(t *testing.T) {
	b := syncguardtest.New()
	entered, gate := make(chan struct{}), make(chan struct{})
	var once sync.Once
	delivered := 0
	_, tb := traced(b, telemetry.Options{BufferSize: 2, OnEvent: func(telemetry.LockEvent) {
		once.Do(func() { close(entered) })
		<-gate
		delivered++
	}})
	ctx := context.Background()
	_, _ = b.IsLocked(ctx, "k")
	<-entered // the first event is being delivered; the queue is empty
	for range 10 {
		_, _ = b.IsLocked(ctx, "k")
	}
	if d := tb.Dropped(); d != 8 {
		t.Fatalf("a full buffer (2) drops and counts the rest: want 8 dropped, got %d", d)
	}
	close(gate)
	flush(t, tb)
	if delivered != 3 {
		t.Fatalf("want the 3 buffered events delivered, got %d", delivered)
	}
}

func TestTelemetryErrorsAndSlogSink(t *testing.T) {
	b := syncguardtest.New()
	b.SetHook(func(_ context.Context, c syncguardtest.Call) error {
		return &syncguard.Error{Op: string(c.Op), Code: syncguard.ErrServiceUnavailable, Key: "secret-key", Msg: "down"}
	})
	logger, buf := captureLogger()
	_, tb := traced(b, telemetry.Options{OnEvent: telemetry.SlogSink(logger, slog.LevelDebug)})
	_, _ = b.Acquire(context.Background(), "secret-key", time.Second)
	flush(t, tb)
	out := buf.String()
	for _, want := range []string{`"level":"WARN"`, `"type":"acquire"`, `"result":"fail"`, `"code":"ServiceUnavailable"`, syncguard.HashKey("secret-key")} {
		if !strings.Contains(out, want) {
			t.Errorf("slog sink output lacks %s: %s", want, out)
		}
	}
	if strings.Contains(out, "secret-key") {
		t.Errorf("no raw key without IncludeRaw: %s", out)
	}
}

func TestTelemetryIdleTracerHoldsNoGoroutine(t *testing.T) {
	// Inside a synctest bubble every goroutine must have exited when the
	// test function returns; an idle Tracer must not keep one.
	synctest.Test(t, func(t *testing.T) {
		b, _ := traced(syncguardtest.New(), telemetry.Options{OnEvent: func(telemetry.LockEvent) {}})
		_, _ = b.IsLocked(t.Context(), "k")
		synctest.Wait()
	})
}

func TestTelemetryDebugLookups(t *testing.T) {
	b := syncguardtest.New()
	ctx := context.Background()
	a, _ := b.Acquire(ctx, "k", time.Minute)
	rec := &recorder{}
	_, tb := traced(b, telemetry.Options{OnEvent: rec.on})
	if d, err := b.LookupKeyDebug(ctx, "k"); err != nil || d == nil || d.LockID != a.LockID {
		t.Fatalf("LookupKeyDebug: %+v %v", d, err)
	}
	if d, err := b.LookupIDDebug(ctx, a.LockID); err != nil || d == nil || d.Key != "k" {
		t.Fatalf("LookupIDDebug: %+v %v", d, err)
	}
	flush(t, tb)
	if evs := rec.all(); len(evs) != 2 || evs[0].Type != "lookup" || evs[1].LockIDHash != syncguard.HashKey(a.LockID) {
		t.Errorf("raw lookups emit lookup events: %+v", evs)
	}
}

// Lock and WithLock on a traced backend report each wait and each
// holding with its duration: a contended wait lasts until the holder's
// release, a holding until its end, and a lost lease says why.
func TestTelemetryHelperEvents(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := syncguardtest.New()
		var mu sync.Mutex
		var evs []telemetry.LockEvent
		_, tb := traced(b, telemetry.Options{OnEvent: func(e telemetry.LockEvent) {
			if e.Type == "wait" || e.Type == "hold" {
				mu.Lock()
				evs = append(evs, e)
				mu.Unlock()
			}
		}})
		held, err := b.Acquire(t.Context(), "k", time.Minute)
		if err != nil || !held.OK {
			t.Fatal(held, err)
		}
		time.AfterFunc(3*time.Second, func() { b.Release(context.Background(), held.LockID) })
		err = syncguard.WithLock(t.Context(), b, "k", func(context.Context, *syncguard.Lease) error {
			time.Sleep(2 * time.Second)
			return nil
		}, &syncguard.LockOptions{Acquisition: syncguard.AcquisitionOptions{Timeout: 10 * time.Second}})
		if err != nil {
			t.Fatal(err)
		}
		// A wait that times out, and a lease that is lost.
		b.Acquire(t.Context(), "busy", time.Hour)
		syncguard.WithLock(t.Context(), b, "busy", func(context.Context, *syncguard.Lease) error { return nil },
			&syncguard.LockOptions{Acquisition: syncguard.AcquisitionOptions{Timeout: time.Second}})
		lease, err := syncguard.Lock(t.Context(), b, "lost", &syncguard.LockOptions{TTL: 10 * time.Second, AutoExtend: true})
		if err != nil {
			t.Fatal(err)
		}
		b.Delete(lease.LockID())
		<-lease.Done()
		lease.Close()
		flush(t, tb)
		mu.Lock()
		defer mu.Unlock()
		if len(evs) != 5 {
			t.Fatalf("want wait, hold, wait, wait, hold; got %d events: %+v", len(evs), evs)
		}
		w, h := evs[0], evs[1]
		if w.Type != "wait" || !w.OK || w.Duration < 3*time.Second || w.Duration > 4*time.Second || w.Attempts < 2 || w.KeyHash != syncguard.HashKey("k") {
			t.Errorf("rule: a contended wait reports the time until the holder's release (3 s, the next retry within 1 s after) and its attempts; got %+v", w)
		}
		if h.Type != "hold" || !h.OK || h.Reason != "released" || h.Duration != 2*time.Second {
			t.Errorf("rule: a holding reports the time held (2 s) and that it was released; got %+v", h)
		}
		if e := evs[2]; e.Type != "wait" || e.OK || e.Reason != "timeout" || e.Duration != time.Second || !errors.Is(e.Err, syncguard.ErrAcquisitionTimeout) {
			t.Errorf("rule: a wait that times out says so, with its duration; got %+v", e)
		}
		if e := evs[4]; e.Type != "hold" || e.OK || e.Reason != "lost" || !errors.Is(e.Err, syncguard.ErrLockLost) {
			t.Errorf("rule: a lost lease is reported once, as lost, with ErrLockLost and why; got %+v", e)
		}
	})
}
