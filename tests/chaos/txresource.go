package chaos

import (
	"context"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/syncguard/syncguard-go/syncguard"
	"github.com/syncguard/syncguard-go/tests/pgtest/history"
	"github.com/syncguard/syncguard-go/tests/pgtest/kindcheck"
	"github.com/syncguard/syncguard-go/txguard"
)

// TxGuardEnv selects the database resource: with SYNCGUARD_CHAOS_TXGUARD=1
// (`make chaos CHAOS_TXGUARD=1`) every write of a holder, zombie writes
// included, goes to a table in the run's database through package
// txguard instead of the in-memory fenced resource.
const TxGuardEnv = "SYNCGUARD_CHAOS_TXGUARD"

// txResource is the resource table chaos_<suffix>_resource (key, fence,
// writes) with a fence guard on fence. Raw workers' writes and every
// zombie write check the lease with Guard.Hold in a transaction of their
// own; the helper and WithLock workers' writes ride the SQL function in
// their one statement. Each write also reads the key's fence counter in
// the same transaction: a committed counter above the writer's fence
// means a newer holder's acquire committed, and a write accepted then is
// a write from a lost lease, whatever Hold said.
//
// The run's setup and teardown (chaos.go) do not know of it: the first
// write creates the table, the function and the trigger, and the end of
// the load (the load's context) waits for the writes in flight, stops
// later ones and drops them.
type txResource struct {
	t       *kindcheck.TxTable
	guards  map[*adapter]*txguard.Guard
	timeout time.Duration

	mu     sync.RWMutex // writes hold it shared; the drop exclusively
	closed bool
}

func txMode() bool { return os.Getenv(TxGuardEnv) == "1" }

// kind is the worker's kind: raw, helper or withlock.
func (w *worker) kind() string {
	if parts := strings.Split(w.name, "-"); len(parts) == 3 {
		return parts[1]
	}
	return ""
}

// setupTx creates the resource; a failure is a violation and leaves the
// in-memory resource in use.
func setupTx(r *runner) *txResource {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	name := strings.TrimSuffix(r.cfg.TableName, "_locks") + "_resource"
	t := &txResource{guards: map[*adapter]*txguard.Guard{}, timeout: 2 * r.opts.OpTimeout}
	fail := func(err error) *txResource {
		r.violate(history.Violation{Rule: "the database resource can be set up", Detail: err.Error()})
		return nil
	}
	var err error
	if t.t, err = kindcheck.SetupTxTable(ctx, r.admin, &r.cfg, name); err != nil {
		return fail(err)
	}
	context.AfterFunc(r.ctx, func() { t.drop(r) })
	for _, a := range r.adapt {
		g, err := txguard.New(a.db, &r.cfg)
		if err != nil {
			return fail(err)
		}
		t.guards[a] = g
	}
	return t
}

// drop waits for the writes in flight, refuses later ones and drops the
// resource's objects.
func (t *txResource) drop(r *runner) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closed = true
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	t.t.Drop(ctx, r.admin)
}

// txOutcome is what became of one write (kindcheck.TxOutcome).
type txOutcome = kindcheck.TxOutcome

const (
	txAccepted     = kindcheck.TxAccepted
	txLeaseExpired = kindcheck.TxLeaseExpired
	txLeaseGone    = kindcheck.TxLeaseGone
	txError        = kindcheck.TxError
	txViolation    = kindcheck.TxViolation
)

// write makes one write of worker w with the lease lockID (fence fence)
// on key and records it in the history (unless noRecord) as a
// lease-checked write for the linearizability checker: OK when it
// committed (at the server time Hold read, when it ran), Fail when the
// lease's row was gone (a write rejected as expired is not recorded: the
// check has no tolerance, the checker's liveness has the spec's),
// Unknown after a fault. viaSQL uses the SQL function, else Hold.
func (t *txResource) write(w *worker, key, lockID string, fence int64, viaSQL, noRecord bool) (txOutcome, string) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.closed {
		return txError, "closed"
	}
	op := history.Op{Client: w.name, Key: key, Kind: history.OpLeaseWrite, Lock: syncguard.HashKey(lockID), Fence: fence, Call: time.Now()}
	out, detail := t.do(w, key, lockID, fence, viaSQL, &op.ServerMs)
	op.Return = time.Now()
	switch out {
	case txAccepted:
		op.Outcome = history.OK
	case txLeaseGone:
		op.Outcome, op.ServerMs = history.Fail, 0
	case txError:
		op.Outcome, op.ServerMs = history.Unknown, 0
	default:
		return out, detail
	}
	if !noRecord {
		w.r.hist.Record(op)
	}
	return out, detail
}

func (t *txResource) do(w *worker, key, lockID string, fence int64, viaSQL bool, serverMs *int64) (txOutcome, string) {
	ctx, cancel := context.WithTimeout(context.Background(), t.timeout)
	defer cancel()
	out, detail, ms := t.t.Write(ctx, w.a.db, t.guards[w.a], key, lockID, fence, viaSQL)
	*serverMs = ms
	return out, detail
}
