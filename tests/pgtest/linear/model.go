// Package linear checks the histories of the fault runs (tests/chaos,
// tests/ha) for linearizability with porcupine
// (github.com/anishathalye/porcupine), against two models:
//
//   - a lease lock whose expiry steps on the server's clock (LockModel):
//     the state is the holder's lockId, its expiry and the last fence
//     handed out; an acquire succeeds only if the key is free or its lock
//     expired (plus the tolerance) at the acquire's server time, with a
//     fence above the last; an extend only by the holder of a live lock; a
//     release only by the holder of a live lock; a lease-checked write
//     only by the holder of a live lock;
//   - a fenced resource (ResourceModel): a write is accepted only with a
//     fence at least as large as every fence accepted before.
//
// Porcupine's models have no clock: an operation's effect depends only on
// the state and the operation. Expiry is encoded by putting the server's
// time into the operation's input: the time the statement read (from what
// it returned: acquired_at_ms, an extend's new expiry minus its ttl) or, for
// an operation that returned no server time, the window of server times it
// can have run at (its local call and return times, widened by
// Options.ClockSkew: the servers run on the test's host). Liveness is then
// a function of the state and the input, and porcupine's search over
// orders stays exact. Operations are partitioned by key (each key's lock
// and resource are independent objects).
package linear

import (
	"fmt"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/syncguard/syncguard-go/tests/pgtest/history"
)

// ToleranceMs is the liveness tolerance of the spec (TIME_TOLERANCE_MS):
// a lock is live while expires_at_ms > now_ms - ToleranceMs.
const ToleranceMs = 1000

func live(expiresMs, nowMs int64) bool { return expiresMs > nowMs-ToleranceMs }

// input is an operation as the models see it.
type input struct {
	Kind  history.OpKind
	Lock  string
	Fence int64
	// AtMs is the server time of the statement (0: unknown); LoMs..HiMs
	// the window it lies in when unknown (0: unbounded).
	AtMs, LoMs, HiMs int64
	ExpiresMs        int64 // the expiry it set (OK acquire/extend)
	Client           string
}

// lockState is LockModel's state.
type lockState struct {
	Holder    string // lockId hash; "" when free
	ExpiresMs int64
	Fence     int64 // the last fence handed out
}

// liveAtSome: the holder's lock is live at some time the operation can
// have run at.
func liveAtSome(s lockState, in input) bool {
	switch {
	case in.AtMs != 0:
		return live(s.ExpiresMs, in.AtMs)
	case in.LoMs != 0:
		return live(s.ExpiresMs, in.LoMs)
	}
	return true
}

// deadAtSome: the holder's lock is expired at some time the operation can
// have run at.
func deadAtSome(s lockState, in input) bool {
	switch {
	case in.AtMs != 0:
		return !live(s.ExpiresMs, in.AtMs)
	case in.HiMs != 0:
		return !live(s.ExpiresMs, in.HiMs)
	}
	return true
}

// stepLock is the lease lock's sequential specification; ok is false when
// the operation cannot have had this outcome in state s.
func stepLock(s lockState, in input, out history.Outcome) (bool, lockState) {
	holds := s.Holder != "" && s.Holder == in.Lock
	switch in.Kind {
	case history.OpAcquire:
		if out != history.OK {
			return true, s // contention, a waiter ahead, a stale snapshot: never wrong
		}
		free := s.Holder == "" || deadAtSome(s, in)
		if !free || in.Fence <= s.Fence {
			return false, s
		}
		return true, lockState{Holder: in.Lock, ExpiresMs: in.ExpiresMs, Fence: in.Fence}
	case history.OpExtend, history.OpRelease, history.OpLeaseWrite:
		if out != history.OK {
			return !holds || deadAtSome(s, in), s
		}
		if !holds || !liveAtSome(s, in) {
			return false, s
		}
		switch in.Kind {
		case history.OpExtend:
			s.ExpiresMs = in.ExpiresMs
		case history.OpRelease:
			s.Holder = ""
		}
		return true, s
	case history.OpExpire:
		if !holds {
			return true, s
		}
		if !deadAtSome(s, in) {
			return false, s
		}
		s.Holder = ""
		return true, s
	}
	return false, s
}

// LockModel is the lease lock (see the package doc). Operations of
// unknown outcome may or may not have taken effect.
var LockModel = porcupine.NondeterministicModel{
	Init: func() []interface{} { return []interface{}{lockState{}} },
	Step: func(state, in, out interface{}) []interface{} {
		s, i, o := state.(lockState), in.(input), out.(history.Outcome)
		if o == history.Unknown {
			res := []interface{}{s}
			if ok, n := stepLock(s, i, history.OK); ok && n != s {
				res = append(res, n)
			}
			return res
		}
		if ok, n := stepLock(s, i, o); ok {
			return []interface{}{n}
		}
		return nil
	},
	DescribeOperation: describeOp,
	DescribeState: func(state interface{}) string {
		s := state.(lockState)
		if s.Holder == "" {
			return fmt.Sprintf("free, last fence %d", s.Fence)
		}
		return fmt.Sprintf("held by %s until %s, fence %d", short(s.Holder), msTime(s.ExpiresMs), s.Fence)
	},
}

// ResourceModel is the fenced resource: the state is the largest fence
// accepted.
var ResourceModel = porcupine.NondeterministicModel{
	Init: func() []interface{} { return []interface{}{int64(0)} },
	Step: func(state, in, out interface{}) []interface{} {
		m, i, o := state.(int64), in.(input), out.(history.Outcome)
		accept := i.Fence >= m
		switch {
		case o == history.Unknown && accept:
			return []interface{}{m, i.Fence}
		case o == history.Unknown, o == history.Fail && !accept:
			return []interface{}{m}
		case o == history.OK && accept:
			return []interface{}{i.Fence}
		}
		return nil
	},
	DescribeOperation: describeOp,
	DescribeState:     func(state interface{}) string { return fmt.Sprintf("largest fence accepted %d", state.(int64)) },
}

func describeOp(in, out interface{}) string {
	i := in.(input)
	s := fmt.Sprintf("%s %s", i.Client, i.Kind)
	if i.Lock != "" {
		s += " lock " + short(i.Lock)
	}
	if i.Fence != 0 {
		s += fmt.Sprintf(" fence %d", i.Fence)
	}
	switch {
	case i.AtMs != 0:
		s += " at " + msTime(i.AtMs)
	case i.LoMs != 0 || i.HiMs != 0:
		s += fmt.Sprintf(" within %s..%s", msTime(i.LoMs), msTime(i.HiMs))
	}
	if i.ExpiresMs != 0 {
		s += " expires " + msTime(i.ExpiresMs)
	}
	return s + " -> " + string(out.(history.Outcome))
}

func short(h string) string {
	if len(h) > 8 {
		return h[:8]
	}
	return h
}

func msTime(ms int64) string {
	if ms == 0 {
		return "?"
	}
	return time.UnixMilli(ms).UTC().Format("15:04:05.000")
}
