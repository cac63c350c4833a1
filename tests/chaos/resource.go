package chaos

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/syncguard/syncguard-go/internal/rules"
	"github.com/syncguard/syncguard-go/tests/pgtest/history"
)

// ResourceStats counts writes to the fenced resource.
type ResourceStats struct {
	Accepted, RejectedInBelief, ZombieAccepted, ZombieRejected int64
	// The database resource (TxGuardEnv) only: Tx is set; the rejections
	// by the lease check split by why (ZombieRejected = ZombieExpired +
	// ZombieGone); LeaseLostInBelief counts writes sent while the holder
	// believed it held the lock that reached the server after the lease
	// had expired or been taken (no violation: the check is for them);
	// WriteErrors counts writes that failed for a fault.
	Tx                                                        bool
	ZombieExpired, ZombieGone, LeaseLostInBelief, WriteErrors int64
}

// resource is a fenced resource: it accepts a write only with a fence at
// least as large as every fence it accepted before for the key. With
// TxGuardEnv set, writes go to a table through package txguard instead
// (txresource.go).
type resource struct {
	mu   sync.Mutex
	last map[string]int64
	st   ResourceStats

	txOnce sync.Once
	tx     *txResource
}

func (r *resource) write(key string, fence int64, zombie bool) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	ok := fence >= r.last[key]
	if ok {
		r.last[key] = fence
	}
	switch {
	case zombie && ok:
		r.st.ZombieAccepted++
	case zombie:
		r.st.ZombieRejected++
	case ok:
		r.st.Accepted++
	default:
		r.st.RejectedInBelief++
	}
	return ok
}

// put is a write of worker w with its lease on key (lockID, fence, the
// last confirmed expiry): to the database resource in TxGuardEnv mode,
// else to the in-memory one. A zombie write to the database waits until
// the lease has expired by every extend it may have sent: an extend whose
// outcome it never learned may have run up to the tolerance after the
// confirmed expiry (extend accepts a lease live by the spec's tolerance)
// and added a TTL, so it waits for expiry + tolerance + TTL, after which
// the server can only find it lost; the load's end cancels it.
func (r *resource) put(w *worker, key, lockID string, fence int64, expiry time.Time, zombie bool) {
	if txMode() {
		r.txOnce.Do(func() { r.tx = setupTx(w.r) })
	}
	if r.tx == nil {
		w.r.resWrite(w.name, key, fence, zombie)
		return
	}
	if zombie {
		sleepCtx(w.r.ctx, time.Until(expiry.Add(rules.ToleranceMs*time.Millisecond+w.r.opts.TTL+100*time.Millisecond)))
		if w.r.ctx.Err() != nil {
			return
		}
	}
	out, detail := r.tx.write(w, key, lockID, fence, !zombie && w.kind() != "raw", w.r.opts.CompactHistory)
	if v := r.countTx(out, zombie); v != "" {
		if detail != "" {
			v += ": " + detail
		}
		w.r.violate(history.Violation{Rule: "a write through txguard commits only while its lease holds", Key: key, Detail: w.name + ": " + v})
	}
}

// countTx counts a database write's outcome and names a violation.
func (r *resource) countTx(out txOutcome, zombie bool) (violation string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.st.Tx = true
	switch {
	case out == txViolation:
		return "violation"
	case out == txError:
		r.st.WriteErrors++
	case zombie && out == txAccepted:
		r.st.ZombieAccepted++
		return "a zombie write committed after its lease's expiry plus a TTL"
	case zombie:
		r.st.ZombieRejected++
		if out == txLeaseExpired {
			r.st.ZombieExpired++
		} else {
			r.st.ZombieGone++
		}
	case out == txAccepted:
		r.st.Accepted++
	default:
		r.st.LeaseLostInBelief++
	}
	return ""
}

// txLine adds the database resource's counts to a report (TxGuardEnv).
func (s ResourceStats) txLine(b *strings.Builder) {
	if s.Tx {
		fmt.Fprintf(b, "database resource (txguard): %d writes committed, %d in-belief writes found their lease lost when they ran, %d failed for a fault; zombie writes accepted: %d, rejected: %d (%d expired with nobody on the key yet, %d taken over or released)\n",
			s.Accepted, s.LeaseLostInBelief, s.WriteErrors, s.ZombieAccepted, s.ZombieRejected, s.ZombieExpired, s.ZombieGone)
	}
}
