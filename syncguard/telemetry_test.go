package syncguard

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// recorder collects events.
type recorder struct {
	mu     sync.Mutex
	events []LockEvent
}

func (r *recorder) on(e LockEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

func (r *recorder) all() []LockEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]LockEvent(nil), r.events...)
}

func flush(t *testing.T, tb *TelemetryBackend) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := tb.Flush(ctx); err != nil {
		t.Fatalf("Flush: %v", err)
	}
}

func TestTelemetryEventPerOperation(t *testing.T) {
	f := NewFakeBackend()
	rec := &recorder{}
	tb := WithTelemetry(f, TelemetryOptions{OnEvent: rec.on})
	ctx := context.Background()
	const key = "user:42"

	a, _ := tb.Acquire(ctx, key, time.Minute)
	_, _ = tb.Acquire(ctx, key, time.Minute)
	_, _ = tb.IsLocked(ctx, key)
	_, _ = tb.LookupKey(ctx, key)
	_, _ = tb.LookupID(ctx, a.LockID)
	_, _ = tb.Extend(ctx, a.LockID, time.Minute)
	_, _ = tb.Release(ctx, a.LockID)
	_, _ = tb.Release(ctx, a.LockID)
	_, _ = tb.Extend(ctx, a.LockID, time.Minute)
	_, _ = tb.IsLocked(ctx, key)
	_, _ = tb.LookupKey(ctx, key)
	b, _ := tb.Acquire(ctx, "other", time.Minute)
	f.Expire(b.LockID)
	_, _ = tb.Release(ctx, b.LockID)
	_, err := tb.Acquire(ctx, "", time.Minute)
	flush(t, tb)

	kh, ih := HashKey(key), HashKey(a.LockID)
	want := []LockEvent{
		{Type: eventAcquire, OK: true, KeyHash: kh, LockIDHash: ih},
		{Type: eventAcquire, KeyHash: kh, Reason: ReasonLocked},
		{Type: eventIsLocked, OK: true, KeyHash: kh},
		{Type: eventLookup, OK: true, KeyHash: kh},
		{Type: eventLookup, OK: true, LockIDHash: ih},
		{Type: eventExtend, OK: true, LockIDHash: ih},
		{Type: eventRelease, OK: true, LockIDHash: ih},
		{Type: eventRelease, LockIDHash: ih, Reason: ReasonNotFound},
		{Type: eventExtend, LockIDHash: ih, Reason: ReasonNotFound},
		{Type: eventIsLocked, KeyHash: kh},
		{Type: eventLookup, KeyHash: kh},
		{Type: eventAcquire, OK: true, KeyHash: HashKey("other"), LockIDHash: HashKey(b.LockID)},
		{Type: eventRelease, LockIDHash: HashKey(b.LockID), Reason: ReasonExpired},
		{Type: eventAcquire, Err: err},
	}
	got := rec.all()
	if len(got) != len(want) {
		t.Fatalf("want %d events, got %d: %+v", len(want), len(got), got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("event %d:\nwant %+v\ngot  %+v", i, want[i], got[i])
		}
	}
}

func TestTelemetryIncludeRaw(t *testing.T) {
	f := NewFakeBackend()
	ctx := context.Background()
	run := func(opts TelemetryOptions) ([]LockEvent, string) {
		rec := &recorder{}
		opts.OnEvent = rec.on
		tb := WithTelemetry(f, opts)
		a, _ := tb.Acquire(ctx, "raw", time.Minute)
		_, _ = tb.Acquire(ctx, "raw", time.Minute)
		_, _ = tb.Release(ctx, a.LockID)
		flush(t, tb)
		return rec.all(), a.LockID
	}

	evs, _ := run(TelemetryOptions{})
	for _, e := range evs {
		if e.Key != "" || e.LockID != "" {
			t.Errorf("no raw values by default: %+v", e)
		}
	}
	evs, id := run(TelemetryOptions{IncludeRaw: true})
	if evs[0].Key != "raw" || evs[0].LockID != id || evs[1].Key != "raw" || evs[2].LockID != id {
		t.Errorf("IncludeRaw adds the raw key and lockId: %+v", evs)
	}
	evs, id = run(TelemetryOptions{IncludeRaw: true, IncludeRawFunc: func(e LockEvent) bool {
		if e.Key != "" || e.LockID != "" {
			t.Error("the predicate sees the event without raw values")
		}
		return !e.OK
	}})
	if evs[0].Key != "" || evs[1].Key != "raw" || evs[2].LockID != "" {
		t.Errorf("IncludeRawFunc decides per event (only the failed acquire here): %+v, %s", evs, id)
	}
	evs, _ = run(TelemetryOptions{IncludeRawFunc: func(LockEvent) bool { panic("bad predicate") }})
	if len(evs) != 3 || evs[0].Key != "" {
		t.Errorf("a panicking predicate means no raw values, and events still flow: %+v", evs)
	}
}

func TestTelemetrySlowCallbackNeverDelaysOperations(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := NewFakeBackend()
		delivered := 0
		tb := WithTelemetry(f, TelemetryOptions{OnEvent: func(LockEvent) {
			time.Sleep(time.Hour)
			delivered++
		}})
		start := time.Now()
		err := WithLock(t.Context(), tb, "k", func(context.Context, *Lease) error { return nil }, nil)
		if err != nil || time.Since(start) != 0 {
			t.Fatalf("operations must not wait for OnEvent: took %v, err %v", time.Since(start), err)
		}
		if err := tb.Flush(t.Context()); err != nil {
			t.Fatal(err)
		}
		if delivered != 2 || time.Since(start) != 2*time.Hour {
			t.Fatalf("events are delivered in the background, one at a time: %d after %v", delivered, time.Since(start))
		}
	})
}

func TestTelemetryPanickingCallbackIsContained(t *testing.T) {
	f := NewFakeBackend()
	logger, buf := captureLogger()
	n := 0
	tb := WithTelemetry(f, TelemetryOptions{Logger: logger, OnEvent: func(e LockEvent) {
		n++
		if e.Type == eventAcquire {
			panic("callback bug")
		}
	}})
	err := WithLock(context.Background(), tb, "k", func(context.Context, *Lease) error { return nil }, nil)
	flush(t, tb)
	if err != nil || n != 2 {
		t.Fatalf("a panicking OnEvent breaks nothing: err %v, %d events delivered", err, n)
	}
	if !strings.Contains(buf.String(), "callback bug") {
		t.Errorf("the panic is logged: %s", buf.String())
	}
}

func TestTelemetryDropsAndCountsWhenFull(t *testing.T) {
	f := NewFakeBackend()
	entered, gate := make(chan struct{}), make(chan struct{})
	var once sync.Once
	delivered := 0
	tb := WithTelemetry(f, TelemetryOptions{BufferSize: 2, OnEvent: func(LockEvent) {
		once.Do(func() { close(entered) })
		<-gate
		delivered++
	}})
	ctx := context.Background()
	_, _ = tb.IsLocked(ctx, "k")
	<-entered // the first event is being delivered; the queue is empty
	for range 10 {
		_, _ = tb.IsLocked(ctx, "k")
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
	f := NewFakeBackend()
	f.SetFail(func(_ context.Context, op string) error {
		return &Error{Op: op, Code: CodeServiceUnavailable, Key: "secret-key", Msg: "down"}
	})
	logger, buf := captureLogger()
	tb := WithTelemetry(f, TelemetryOptions{OnEvent: SlogSink(logger, slog.LevelDebug)})
	_, _ = tb.Acquire(context.Background(), "secret-key", time.Second)
	flush(t, tb)
	out := buf.String()
	for _, want := range []string{`"level":"WARN"`, `"type":"acquire"`, `"result":"fail"`, `"code":"ServiceUnavailable"`, HashKey("secret-key")} {
		if !strings.Contains(out, want) {
			t.Errorf("slog sink output lacks %s: %s", want, out)
		}
	}
	if strings.Contains(out, "secret-key") {
		t.Errorf("no raw key without IncludeRaw: %s", out)
	}
}

func TestTelemetryIdleWrapperHoldsNoGoroutine(t *testing.T) {
	// Inside a synctest bubble every goroutine must have exited when the
	// test function returns; an idle wrapper must not keep one.
	synctest.Test(t, func(t *testing.T) {
		tb := WithTelemetry(NewFakeBackend(), TelemetryOptions{OnEvent: func(LockEvent) {}})
		_, _ = tb.IsLocked(t.Context(), "k")
		synctest.Wait()
	})
}

func TestTelemetryForwardsDebugLookups(t *testing.T) {
	f := NewFakeBackend()
	rec := &recorder{}
	tb := WithTelemetry(f, TelemetryOptions{OnEvent: rec.on})
	ctx := context.Background()
	a, _ := f.Acquire(ctx, "k", time.Minute)
	d, err := tb.LookupKeyDebug(ctx, "k")
	if err != nil || d == nil || d.LockID != a.LockID {
		t.Fatalf("LookupKeyDebug through the wrapper: %+v %v", d, err)
	}
	d, err = tb.LookupIDDebug(ctx, a.LockID)
	if err != nil || d == nil || d.Key != "k" {
		t.Fatalf("LookupIDDebug through the wrapper: %+v %v", d, err)
	}
	flush(t, tb)
	if evs := rec.all(); len(evs) != 2 || evs[0].Type != eventLookup || evs[1].LockIDHash != HashKey(a.LockID) {
		t.Errorf("raw lookups emit lookup events: %+v", evs)
	}
	plain := WithTelemetry(lookupOnly{f}, TelemetryOptions{})
	_, err = plain.LookupKeyDebug(ctx, "k")
	requireCode(t, err, CodeInvalidArgument)
	if plain.Unwrap() != (lookupOnly{f}) {
		t.Error("Unwrap returns the wrapped backend")
	}
}

// lookupOnly hides the fake's debug lookups.
type lookupOnly struct{ LockBackend }
