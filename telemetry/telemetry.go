// Package telemetry is the spec's opt-in telemetry (withTelemetry,
// ADR-007): a syncguard.Tracer that reports every completed operation as
// a LockEvent, with hashed keys and lockIds, to a callback that never runs
// on the caller's path.
//
//	events := telemetry.New(telemetry.Options{OnEvent: telemetry.SlogSink(logger, slog.LevelInfo)})
//	locks, err := syncguard.New(db, &syncguard.Config{Tracer: events})
//
// Without it (Config.Tracer nil) a Backend computes no hash and builds no
// event. With it, the caller's path only queues the raw values; hashes
// are computed and OnEvent is called on a goroutine of the Tracer, so a
// slow, failing or panicking OnEvent never delays or breaks a lock
// operation (the spec's async isolation).
package telemetry

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/syncguard/syncguard-go/syncguard"
)

// Event types (LockEvent.Type): one per LockBackend operation, the same
// words as syncguard.Error.Op, and two of Lock and WithLock.
const (
	EventAcquire  = "acquire"
	EventRelease  = "release"
	EventExtend   = "extend"
	EventIsLocked = "isLocked"
	EventLookup   = "lookup" // LookupKey, LookupID and their Debug forms
	EventWait     = "wait"   // one acquisition of Lock or WithLock
	EventHold     = "hold"   // one Lease, when it ends
)

// LockEvent.Reason of "wait" and "hold" events.
const (
	reasonTimeout   = "timeout"   // wait: AcquisitionTimeout
	reasonCancelled = "cancelled" // wait: ctx ended (Aborted)
	reasonError     = "error"     // wait: another error (see Err)
	reasonReleased  = "released"  // hold: released by its holder
	reasonLost      = "lost"      // hold: lost (see Err)
)

// LockEvent describes one completed LockBackend operation, as in the spec,
// or one acquisition ("wait", when it ends) or one Lease ("hold", when it
// ends) of Lock and WithLock.
type LockEvent struct {
	// Type is one of the Event constants.
	Type string
	// OK is the spec's result "ok" (true) or "fail" (false). An acquire
	// fails on contention, a release or extend when the lock was absent,
	// IsLocked when the key is free, a lookup when nothing was found;
	// every operation that returned an error fails too (see Err).
	OK bool
	// KeyHash (operations on a key) and LockIDHash (operations on a lockId,
	// and successful acquires) are syncguard.HashKey values.
	KeyHash    string
	LockIDHash string
	// Reason is syncguard.ReasonLocked for a contended acquire,
	// ReasonExpired or ReasonNotFound for a failed release or extend;
	// "timeout" (AcquisitionTimeout), "cancelled" (ctx ended) or "error"
	// for a failed "wait"; "released" (by its holder) or "lost" (Err wraps
	// ErrLockLost) for a "hold"; empty otherwise.
	Reason string
	// Key and LockID are the raw values, set only when Options.IncludeRaw
	// or IncludeRawFunc allows it.
	Key    string
	LockID string
	// Err is the error the operation returned, if any. Its Error() prints
	// only hashes, but a *syncguard.Error carries the raw key and lockId in
	// its fields: don't serialize it field by field.
	Err error
	// Duration is how long the operation took (the caller's view), the time
	// waited ("wait") or held ("hold").
	Duration time.Duration
	// Attempts is the number of acquire attempts of a "wait"; 0 otherwise.
	Attempts int
	// LossReason, for a "hold" that lost its lock, says why (see
	// syncguard.Lease.LossReason): "not-extended", "expired" or "gone".
	LossReason string
}

// Options configures New.
type Options struct {
	// OnEvent receives every event, in order, on a goroutine of the
	// Tracer, never on the caller's: a slow, failing or panicking OnEvent
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
	// are dropped and counted (Dropped). Default 1024.
	BufferSize int
	// Logger receives a record when OnEvent panics. Default slog.Default().
	Logger *slog.Logger
}

// Tracer is a syncguard.Tracer that reports LockEvents (New). OnEvent
// runs on one goroutine per Tracer, gone when no event waits: it needs no
// Close.
type Tracer struct {
	opts   Options
	logger *slog.Logger
	q      *eventQueue[rawEvent]
}

var (
	_ syncguard.Tracer = (*Tracer)(nil)
	_ slog.LogValuer   = LockEvent{}
)

// rawEvent is what the caller's path queues for a LockEvent.
type rawEvent struct {
	typ, reason string
	loss        string
	ok          bool
	key, lockID string
	err         error
	dur         time.Duration
	attempts    int
}

// New returns a Tracer that emits one LockEvent to opts.OnEvent per
// completed operation, wait and holding (docs/spec.md, rule TE1): set it
// as syncguard.Config.Tracer (or LockOptions.Tracer).
func New(opts Options) *Tracer {
	if opts.BufferSize <= 0 {
		opts.BufferSize = 1024
	}
	if opts.OnEvent == nil {
		opts.OnEvent = func(LockEvent) {}
	}
	t := &Tracer{opts: opts, logger: opts.Logger}
	if t.logger == nil {
		t.logger = slog.Default()
	}
	t.q = newEventQueue(opts.BufferSize, t.deliver)
	return t
}

// Dropped returns how many events were dropped because the buffer was full.
func (t *Tracer) Dropped() uint64 { return t.q.Dropped() }

// Flush waits until the queue of events is empty and OnEvent has returned
// for all of them, or ctx is done. Use it before exit, or in tests; never
// from OnEvent itself.
func (t *Tracer) Flush(ctx context.Context) error { return t.q.Flush(ctx) }

// OpStart implements syncguard.Tracer.
func (t *Tracer) OpStart(ctx context.Context, _ syncguard.TraceOp) context.Context { return ctx }

// OpEnd implements syncguard.Tracer: the operation's event.
func (t *Tracer) OpEnd(_ context.Context, op syncguard.TraceOp) {
	t.q.Push(rawEvent{typ: op.Op, ok: op.OK, reason: op.Reason, key: op.Key, lockID: op.LockID, err: op.Err, dur: op.Duration})
}

// LockStart implements syncguard.Tracer.
func (t *Tracer) LockStart(ctx context.Context, _ syncguard.TraceLock) context.Context { return ctx }

// WaitEnd implements syncguard.Tracer: the "wait" event.
func (t *Tracer) WaitEnd(_ context.Context, l syncguard.TraceLock) {
	e := rawEvent{typ: EventWait, ok: l.Err == nil, key: l.Key, err: l.Err, dur: l.Waited, attempts: l.Attempts}
	switch {
	case l.Err == nil:
		e.lockID = l.LockID
	case errors.Is(l.Err, syncguard.ErrAcquisitionTimeout):
		e.reason = reasonTimeout
	case errors.Is(l.Err, syncguard.ErrAborted):
		e.reason = reasonCancelled
	default:
		e.reason = reasonError
	}
	t.q.Push(e)
}

// HoldEnd implements syncguard.Tracer: the "hold" event.
func (t *Tracer) HoldEnd(_ context.Context, l syncguard.TraceLock) {
	e := rawEvent{typ: EventHold, ok: errors.Is(l.Err, syncguard.ErrLeaseReleased), reason: reasonReleased,
		key: l.Key, lockID: l.LockID, dur: l.Held}
	if !e.ok {
		e.reason, e.err, e.loss = reasonLost, l.Err, l.LossReason
	}
	t.q.Push(e)
}

// LockEnd implements syncguard.Tracer.
func (t *Tracer) LockEnd(context.Context, syncguard.TraceLock) {}

func (t *Tracer) deliver(e *rawEvent) {
	ev := LockEvent{Type: e.typ, OK: e.ok, Reason: e.reason, Err: e.err, Duration: e.dur, Attempts: e.attempts, LossReason: e.loss}
	if e.key != "" {
		ev.KeyHash = syncguard.HashKey(e.key)
	}
	if e.lockID != "" {
		ev.LockIDHash = syncguard.HashKey(e.lockID)
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

func (t *Tracer) includeRaw(ev LockEvent) (ok bool) {
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
		attrs = append(attrs, slog.String("code", string(syncguard.CodeOf(e.Err))), slog.String("error", e.Err.Error()))
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
