package syncguard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// Event types (LockEvent.Type): one per LockBackend operation, the same
// words as Error.Op, and two of the lock helper (Lock, WithLock, Lease).
const (
	EventAcquire  = "acquire"
	EventRelease  = "release"
	EventExtend   = "extend"
	EventIsLocked = "isLocked"
	EventLookup   = "lookup" // LookupKey, LookupID and their Debug forms
	EventWait     = "wait"   // one acquisition of Lock or WithLock
	EventHold     = "hold"   // one Lease, when it ends
)

// The lock helper's reasons, and LockEvent.LossReason's values.
const (
	reasonTimeout   = "timeout"   // wait: AcquisitionTimeout
	reasonCancelled = "cancelled" // wait: ctx ended (Aborted)
	reasonError     = "error"     // wait: another error (see Err)
	reasonReleased  = "released"  // hold: released by its holder
	reasonLost      = "lost"      // hold: lost (see Err)

	lossNotExtended = "not-extended"
	lossExpired     = "expired"
	lossGone        = "gone"
)

// rawEvent is what the caller's path records for a LockEvent.
type rawEvent struct {
	typ, reason string
	loss        string // LockEvent.LossReason
	ok          bool
	key, lockID string
	err         error
	dur         time.Duration
	attempts    int
}

// helperSink receives the lock helper's events (TelemetryBackend).
type helperSink interface{ helperEvent(rawEvent) }

func waitEvent(key string, res AcquireResult, err error, attempts int, start time.Time) rawEvent {
	e := rawEvent{typ: EventWait, ok: err == nil, key: key, err: err, dur: time.Since(start), attempts: attempts}
	switch {
	case err == nil:
		e.lockID = res.LockID
	case errors.Is(err, ErrAcquisitionTimeout):
		e.reason = reasonTimeout
	case errors.Is(err, ErrAborted):
		e.reason = reasonCancelled
	default:
		e.reason = reasonError
	}
	return e
}

// LockEvent describes one completed LockBackend operation, as in the spec,
// or, when Lock or WithLock is given the TelemetryBackend (or a wrapper
// whose Unwrap leads to it), one acquisition ("wait", when it ends) or one
// Lease ("hold", when it ends) of the lock helper.
type LockEvent struct {
	// Type is one of the Event constants.
	Type string
	// OK is the spec's result "ok" (true) or "fail" (false). An acquire
	// fails on contention, a release or extend when the lock was absent,
	// IsLocked when the key is free, a lookup when nothing was found;
	// every operation that returned an error fails too (see Err).
	OK bool
	// KeyHash (operations on a key) and LockIDHash (operations on a lockId,
	// and successful acquires) are HashKey values.
	KeyHash    string
	LockIDHash string
	// Reason is ReasonLocked for a contended acquire, ReasonExpired or
	// ReasonNotFound for a failed release or extend; "timeout"
	// (AcquisitionTimeout), "cancelled" (ctx ended) or "error" for a failed
	// "wait"; "released" (by its holder) or "lost" (Err wraps ErrLockLost)
	// for a "hold"; empty otherwise.
	Reason string
	// Key and LockID are the raw values, set only when
	// TelemetryOptions.IncludeRaw or IncludeRawFunc allows it.
	Key    string
	LockID string
	// Err is the error the operation returned, if any. Its Error() prints
	// only hashes, but a *Error carries the raw key and lockId in its
	// fields: don't serialize it field by field.
	Err error
	// Duration is how long the operation took (the caller's view), the time
	// waited ("wait") or held ("hold").
	Duration time.Duration
	// Attempts is the number of acquire attempts of a "wait"; 0 otherwise.
	Attempts int
	// LossReason, for a "hold" that lost its lock, says why: "not-extended"
	// (no extend confirmed in its guaranteed lifetime), or what an extend
	// found: "expired" or "gone" (released elsewhere, deleted or taken over).
	LossReason string
}

// TelemetryOptions configures WithTelemetry.
type TelemetryOptions struct {
	// OnEvent receives every event, in order, on a goroutine of the
	// wrapper, never on the caller's: a slow, failing or panicking OnEvent
	// does not delay or break a lock operation. Events come in batches, each
	// at most 10 ms after its first event (Flush delivers at once). Default:
	// events are discarded (SlogSink makes an OnEvent that logs them).
	OnEvent func(LockEvent)
	// IncludeRaw adds the raw key and lockId to every event. Default false.
	IncludeRaw bool
	// IncludeRawFunc, if set, decides per event instead of IncludeRaw. It
	// sees the event without raw values; a panic counts as false.
	IncludeRawFunc func(LockEvent) bool
	// BufferSize bounds the events waiting for OnEvent; beyond, new events
	// are dropped and counted (TelemetryBackend.Dropped). Default 1024.
	BufferSize int
	// Logger receives a record when OnEvent panics. Default slog.Default().
	Logger *slog.Logger
}

// TelemetryBackend is a LockBackend that reports every operation of the
// backend it wraps as a LockEvent (WithTelemetry). OnEvent runs on one
// goroutine per wrapper, gone when no event waits: it needs no Close.
type TelemetryBackend struct {
	inner  LockBackend
	opts   TelemetryOptions
	logger *slog.Logger
	q      *eventQueue[rawEvent]
}

// debugLookuper is a backend with raw lookups (*Backend, *TelemetryBackend).
type debugLookuper interface {
	LookupKeyDebug(ctx context.Context, key string) (*LockInfoDebug, error)
	LookupIDDebug(ctx context.Context, lockID string) (*LockInfoDebug, error)
}

var (
	_ LockBackend    = (*TelemetryBackend)(nil)
	_ debugLookuper  = (*TelemetryBackend)(nil)
	_ slog.LogValuer = LockEvent{}
)

// WithTelemetry wraps backend so that each completed operation emits one
// LockEvent to opts.OnEvent (docs/spec.md, rule TE1). It also forwards the
// Debug lookups when backend has them, and leases made on it use the
// wrapped Backend's Config.ReleaseTimeout.
func WithTelemetry(backend LockBackend, opts TelemetryOptions) *TelemetryBackend {
	if opts.BufferSize <= 0 {
		opts.BufferSize = 1024
	}
	if opts.OnEvent == nil {
		opts.OnEvent = func(LockEvent) {}
	}
	t := &TelemetryBackend{inner: backend, opts: opts, logger: opts.Logger}
	if t.logger == nil {
		t.logger = slog.Default()
	}
	t.q = newEventQueue(opts.BufferSize, t.deliver)
	return t
}

// Unwrap returns the wrapped backend.
func (t *TelemetryBackend) Unwrap() LockBackend { return t.inner }

// Dropped returns how many events were dropped because the buffer was full.
func (t *TelemetryBackend) Dropped() uint64 { return t.q.Dropped() }

// Flush waits until the queue of events is empty and OnEvent has returned
// for all of them, or ctx is done. Use it before exit, or in tests; never
// from OnEvent itself.
func (t *TelemetryBackend) Flush(ctx context.Context) error { return t.q.Flush(ctx) }

func (t *TelemetryBackend) deliver(e *rawEvent) {
	ev := LockEvent{Type: e.typ, OK: e.ok, Reason: e.reason, Err: e.err, Duration: e.dur, Attempts: e.attempts, LossReason: e.loss}
	if e.key != "" {
		ev.KeyHash = HashKey(e.key)
	}
	if e.lockID != "" {
		ev.LockIDHash = HashKey(e.lockID)
	}
	if t.includeRaw(ev) {
		ev.Key, ev.LockID = e.key, e.lockID
	}
	defer func() {
		if r := recover(); r != nil {
			t.logger.Error("syncguard: telemetry OnEvent panicked; the event is lost",
				slog.String("type", ev.Type), slog.Any("panic", r))
		}
	}()
	t.opts.OnEvent(ev)
}

func (t *TelemetryBackend) includeRaw(ev LockEvent) (ok bool) {
	if t.opts.IncludeRawFunc == nil {
		return t.opts.IncludeRaw
	}
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	return t.opts.IncludeRawFunc(ev)
}

func (t *TelemetryBackend) helperEvent(e rawEvent) { t.q.Push(e) }

// Acquire implements LockBackend.
func (t *TelemetryBackend) Acquire(ctx context.Context, key string, ttl time.Duration) (AcquireResult, error) {
	start := time.Now()
	r, err := t.inner.Acquire(ctx, key, ttl)
	t.emitAcquire(key, r, err, time.Since(start))
	return r, err
}

// Queue implements Queuer when the wrapped backend is one (else it
// returns nil: Lock polls); each attempt of the waiter is an "acquire"
// event.
func (t *TelemetryBackend) Queue(key, identity string, once bool) Waiter {
	q, ok := t.inner.(Queuer)
	if !ok {
		return nil
	}
	w := q.Queue(key, identity, once)
	if w == nil {
		return nil
	}
	return &telemetryWaiter{Waiter: w, t: t, key: key}
}

type telemetryWaiter struct {
	Waiter
	t   *TelemetryBackend
	key string
}

// Attempt is the wrapped waiter's, reported as an "acquire" event.
func (w *telemetryWaiter) Attempt(ctx context.Context, ttl time.Duration) (AcquireResult, error) {
	start := time.Now()
	r, err := w.Waiter.Attempt(ctx, ttl)
	w.t.emitAcquire(w.key, r, err, time.Since(start))
	return r, err
}

func (t *TelemetryBackend) emitAcquire(key string, r AcquireResult, err error, dur time.Duration) {
	e := rawEvent{typ: EventAcquire, ok: err == nil && r.OK, reason: r.Reason, key: key, err: err, dur: dur}
	if r.OK {
		e.lockID = r.LockID
	}
	t.q.Push(e)
}

// Release implements LockBackend.
func (t *TelemetryBackend) Release(ctx context.Context, lockID string) (ReleaseResult, error) {
	start := time.Now()
	r, err := t.inner.Release(ctx, lockID)
	t.q.Push(rawEvent{typ: EventRelease, ok: err == nil && r.OK, reason: r.Reason, lockID: lockID, err: err, dur: time.Since(start)})
	return r, err
}

// Extend implements LockBackend.
func (t *TelemetryBackend) Extend(ctx context.Context, lockID string, ttl time.Duration) (ExtendResult, error) {
	start := time.Now()
	r, err := t.inner.Extend(ctx, lockID, ttl)
	t.q.Push(rawEvent{typ: EventExtend, ok: err == nil && r.OK, reason: r.Reason, lockID: lockID, err: err, dur: time.Since(start)})
	return r, err
}

// IsLocked implements LockBackend.
func (t *TelemetryBackend) IsLocked(ctx context.Context, key string) (bool, error) {
	start := time.Now()
	locked, err := t.inner.IsLocked(ctx, key)
	t.q.Push(rawEvent{typ: EventIsLocked, ok: err == nil && locked, key: key, err: err, dur: time.Since(start)})
	return locked, err
}

// LookupKey implements LockBackend.
func (t *TelemetryBackend) LookupKey(ctx context.Context, key string) (*LockInfo, error) {
	start := time.Now()
	info, err := t.inner.LookupKey(ctx, key)
	t.q.Push(rawEvent{typ: EventLookup, ok: err == nil && info != nil, key: key, err: err, dur: time.Since(start)})
	return info, err
}

// LookupID implements LockBackend.
func (t *TelemetryBackend) LookupID(ctx context.Context, lockID string) (*LockInfo, error) {
	start := time.Now()
	info, err := t.inner.LookupID(ctx, lockID)
	t.q.Push(rawEvent{typ: EventLookup, ok: err == nil && info != nil, lockID: lockID, err: err, dur: time.Since(start)})
	return info, err
}

// LookupKeyDebug is Backend.LookupKeyDebug on the wrapped backend, which
// must have that method (else it fails with ErrInvalidArgument).
func (t *TelemetryBackend) LookupKeyDebug(ctx context.Context, key string) (*LockInfoDebug, error) {
	return t.lookupDebug(rawEvent{key: key}, func(d debugLookuper) (*LockInfoDebug, error) { return d.LookupKeyDebug(ctx, key) })
}

// LookupIDDebug is LookupKeyDebug by lockId (Backend.LookupIDDebug).
func (t *TelemetryBackend) LookupIDDebug(ctx context.Context, lockID string) (*LockInfoDebug, error) {
	return t.lookupDebug(rawEvent{lockID: lockID}, func(d debugLookuper) (*LockInfoDebug, error) { return d.LookupIDDebug(ctx, lockID) })
}

func (t *TelemetryBackend) lookupDebug(e rawEvent, lookup func(debugLookuper) (*LockInfoDebug, error)) (*LockInfoDebug, error) {
	d, ok := t.inner.(debugLookuper)
	if !ok {
		return nil, noDebug(t.inner)
	}
	info, err := lookup(d)
	e.typ, e.ok, e.err = EventLookup, err == nil && info != nil, err
	t.q.Push(e)
	return info, err
}

// Capabilities implements LockBackend.
func (t *TelemetryBackend) Capabilities() Capabilities { return t.inner.Capabilities() }

// LogValue renders the event as a group: type, result, then those of
// keyHash, lockIdHash, reason, key, lockId, duration, attempts, code and
// error that are set.
func (e LockEvent) LogValue() slog.Value {
	attrs := make([]slog.Attr, 0, 8)
	result := "fail"
	if e.OK {
		result = "ok"
	}
	attrs = append(attrs, slog.String("type", e.Type), slog.String("result", result))
	for _, a := range [...]struct{ k, v string }{
		{"keyHash", e.KeyHash}, {"lockIdHash", e.LockIDHash}, {"reason", e.Reason},
		{"key", e.Key}, {"lockId", e.LockID},
	} {
		if a.v != "" {
			attrs = append(attrs, slog.String(a.k, a.v))
		}
	}
	if e.Duration > 0 {
		attrs = append(attrs, slog.Duration("duration", e.Duration))
	}
	if e.Attempts > 0 {
		attrs = append(attrs, slog.Int("attempts", e.Attempts))
	}
	if e.Err != nil {
		attrs = append(attrs, slog.String("code", string(CodeOf(e.Err))), slog.String("error", e.Err.Error()))
	}
	return slog.GroupValue(attrs...)
}

// SlogSink returns an OnEvent that logs each event on logger at level, or
// at slog.LevelWarn when that is higher and the operation returned an
// error. Contention and absent locks are normal outcomes and keep level.
func SlogSink(logger *slog.Logger, level slog.Level) func(LockEvent) {
	return func(e LockEvent) {
		lvl := level
		if e.Err != nil && lvl < slog.LevelWarn {
			lvl = slog.LevelWarn
		}
		ctx := context.Background()
		if !logger.Enabled(ctx, lvl) {
			return
		}
		attrs := e.LogValue().Group()
		logger.LogAttrs(ctx, lvl, "syncguard: "+e.Type+" "+attrs[1].Value.String(), attrs...)
	}
}

func noDebug(b LockBackend) *Error {
	return invalidArg("lookup", fmt.Sprintf("backend %T has no raw lookups (LookupKeyDebug, LookupIDDebug)", b))
}
