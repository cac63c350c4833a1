package history

import (
	"strings"
	"time"
)

// The operation history: what the linearizability checker
// (tests/pgtest/linear) checks. Ops derives the lock operations from the
// holdings recorded by Begin, Extended, ReleaseSent and Ended, so that
// every run that records holdings records operations too; other
// operations (writes to a resource) are added with Record.

// OpKind is the kind of an operation.
type OpKind string

// The kinds of operations.
const (
	OpAcquire OpKind = "acquire"
	OpExtend  OpKind = "extend"
	OpRelease OpKind = "release"
	// OpWrite is a write to a fenced resource: accepted only with a fence
	// at least as large as every fence it accepted before for the key.
	OpWrite OpKind = "write"
	// OpLeaseWrite is a write checked against the lease in its own
	// transaction: committed only while the writer's lock is live.
	OpLeaseWrite OpKind = "leasewrite"
	// OpExpire is the deletion of a lock row that had expired (cleanup),
	// seen only in the audit.
	OpExpire OpKind = "expire"
)

// Outcome is how an operation ended, as its client saw it.
type Outcome string

// The outcomes.
const (
	OK      Outcome = "ok"
	Fail    Outcome = "fail"    // the operation reported that it did nothing
	Unknown Outcome = "unknown" // an error: it may or may not have committed
)

// Op is one operation as its client saw it.
type Op struct {
	Client string
	Key    string // the user key
	Kind   OpKind
	Lock   string        // HashKey of the lockId ("" when unknown)
	TTL    time.Duration // asked for (acquire, extend)
	// Call and Return are the local times the operation was sent and
	// returned; a zero Return: it never returned (or nobody saw it).
	Call, Return time.Time
	Outcome      Outcome
	Fence        int64
	// ServerMs is the server time of the statement (acquired_at_ms, or an
	// extend's new expiry minus its ttl; for audit rows the trigger's
	// clock_timestamp()); 0 when unknown.
	ServerMs int64
	// ExpiresMs is the expiry an acquire or extend set (OK only).
	ExpiresMs int64
	// Source is "client", or "audit" for a committed change that no
	// client operation accounts for.
	Source string
}

// Record adds an operation to the history.
func (h *History) Record(o Op) {
	if o.Source == "" {
		o.Source = "client"
	}
	h.mu.Lock()
	h.ops = append(h.ops, o)
	h.mu.Unlock()
}

// Ops returns the operations: those of the retained holdings (their
// acquire, each confirmed extend, the release) and those recorded with
// Record. An extend's Call is its holding's acquire's (the harness does not
// see when a lease's automatic extension was sent; any later bound could
// be wrong); its Return is when Extended recorded it. A release is OK when
// Ended said so, a failure when it ended with a reason
// ("release:<reason>"), and Unknown otherwise (an error, a WithLock, or a
// release nobody saw end).
func (h *History) Ops() []Op {
	var out []Op
	for _, hd := range h.Holdings() {
		out = append(out, HoldingOps(hd)...)
	}
	h.mu.Lock()
	out = append(out, h.ops...)
	h.mu.Unlock()
	return out
}

// HoldingOps are the operations of one holding (see Ops).
func HoldingOps(hd Holding) []Op {
	base := Op{Client: hd.Worker, Key: hd.Key, Lock: hd.LockHash, TTL: hd.TTL, Fence: hd.Fence, Source: "client"}
	acq := base
	acq.Kind, acq.Call, acq.Return, acq.Outcome = OpAcquire, hd.AcqSent, hd.AckedAt, OK
	acq.ServerMs, acq.ExpiresMs = hd.StartMs, hd.Expiries[0]
	ops := []Op{acq}
	for i, exp := range hd.Expiries[1:] {
		x := base
		x.Kind, x.Call, x.Outcome, x.ExpiresMs, x.ServerMs = OpExtend, hd.AcqSent, OK, exp, exp-hd.TTL.Milliseconds()
		if i < len(hd.ExtendSeen) {
			x.Return = hd.ExtendSeen[i]
		}
		ops = append(ops, x)
	}
	if !hd.ReleaseSent.IsZero() {
		r := base
		r.Kind, r.Call, r.Outcome = OpRelease, hd.ReleaseSent, Unknown
		end := hd.End
		if i := strings.LastIndex(end, "; "); i >= 0 {
			end = end[i+2:] // "lost:<why>; released"
		}
		switch {
		case end == "released" && hd.ReleaseOK:
			r.Outcome, r.Return = OK, hd.EndedAt
		case strings.HasPrefix(end, "release:") && !strings.HasPrefix(end, "release:error"):
			r.Outcome, r.Return = Fail, hd.EndedAt
		}
		ops = append(ops, r)
	}
	return ops
}
