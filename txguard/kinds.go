package txguard

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"time"

	"github.com/syncguard/syncguard-go/internal/kit"
	"github.com/syncguard/syncguard-go/multilock"
	"github.com/syncguard/syncguard-go/rwlock"
	"github.com/syncguard/syncguard-go/semaphore"
	"github.com/syncguard/syncguard-go/syncguard"
)

// kind is the kind of lock a lease is of: which table holds its rows.
type kind int

const (
	kindMutex     kind = iota // syncguard.Backend: a row in the lock table
	kindMultiLock             // multilock.Locker: a row per key of the set
	kindSemaphore             // semaphore.Semaphore: the permit's slot row
	kindRWLock                // rwlock.Locker: the reader's or writer's holder row
	numKinds
)

// holdFiles are the hold statements of each kind (sql/).
var holdFiles = [numKinds]string{"hold.sql", "hold_multilock.sql", "hold_semaphore.sql", "hold_rwlock.sql"}

func (k kind) String() string {
	return [numKinds]string{"mutex", "multilock", "semaphore", "rwlock"}[k]
}

// Lease is a held lease of any kind of lock: a *syncguard.Lease (of a
// syncguard.Backend, a semaphore.Semaphore or an rwlock Locker), a
// *multilock.Lease or a *semaphore.Permit (both embed one). Locker tells
// HoldLease the kind of lock, and so the tables that hold the lease.
type Lease interface {
	Key() string
	LockID() string
	Err() error
	Locker() syncguard.Locker
}

// kindOf finds the kind of a lease's Locker (through wrappers that
// Unwrap, as syncguard.As does) and the lock table it was configured
// with (syncguard.Config.TableName). No I/O.
func kindOf(l syncguard.Locker) (kind, string, bool) {
	if l == nil {
		return 0, "", false
	}
	if b, ok := syncguard.As[*syncguard.Backend](l); ok {
		return kindMutex, b.TableName(), true
	}
	if m, ok := syncguard.As[*multilock.Locker](l); ok {
		return kindMultiLock, m.Tables().Locks, true
	}
	if s, ok := syncguard.As[*semaphore.Semaphore](l); ok {
		return kindSemaphore, s.TableName(), true
	}
	if r, ok := syncguard.As[*rwlock.Locker](l); ok {
		return kindRWLock, r.RWLock().TableName(), true
	}
	return 0, "", false
}

// leaseOf returns the *syncguard.Lease inside lease, nil when there is
// none (a nil lease, or a *multilock.Lease or *semaphore.Permit without
// one); other implementations are taken as they are.
func leaseOf(lease Lease) (Lease, bool) {
	switch v := lease.(type) {
	case nil:
		return nil, false
	case *syncguard.Lease:
		return v, v != nil
	case *multilock.Lease:
		if v == nil || v.Lease == nil {
			return nil, false
		}
		return v.Lease, true
	case *semaphore.Permit:
		if v == nil || v.Lease == nil {
			return nil, false
		}
		return v.Lease, true
	}
	return lease, true
}

// checkLease finds the kind of lease and checks that it is held in this
// Guard's tables; bad input is InvalidArgument before any I/O.
func (g *Guard) checkLease(op string, lease Lease) (Lease, kind, error) {
	lease, ok := leaseOf(lease)
	if !ok {
		return nil, 0, invalidArg(op, "lease must not be nil")
	}
	k, table, ok := kindOf(lease.Locker())
	if !ok {
		e := invalidArg(op, fmt.Sprintf("cannot check a lease of Locker %T: HoldLease checks leases of a *syncguard.Backend, a "+
			"*multilock.Locker, a *semaphore.Semaphore or an *rwlock.Locker (a wrapper must implement Unwrap() syncguard.LockBackend)",
			lease.Locker()))
		e.Key = lease.Key()
		return nil, 0, e
	}
	want := g.table
	if k == kindMultiLock {
		want = g.tables["ml_locks"]
	}
	if table != want {
		e := invalidArg(op, fmt.Sprintf("the lease's %s keeps its rows under lock table %q, this Guard checks those of %q: "+
			"make the Guard with the Locker's syncguard.Config", k, table, want))
		e.Key = lease.Key()
		return nil, 0, e
	}
	return lease, k, nil
}

// holdSet is Hold for a multilock set: every key's row of the holding
// lockID, locked FOR SHARE (hold_multilock.sql); it holds when the rows
// are the set's keys, all of them, and live by the server's clock.
func (g *Guard) holdSet(ctx context.Context, tx syncguard.Tx, set, lockID string) (Held, error) {
	const op = "hold"
	keys, err := multilock.ParseKeys(set)
	if err != nil {
		if e, ok := err.(*syncguard.Error); ok {
			e.Op = op
		}
		return Held{}, err
	}
	if e := kit.CheckLockID(op, lockID); e != nil {
		return Held{}, e
	}
	tx, e := callerTx(op, tx)
	if e != nil {
		return Held{}, e
	}
	if err := ctx.Err(); err != nil {
		return Held{}, g.wrap(ctx, op, set, lockID, err)
	}
	rows, err := tx.QueryContext(ctx, g.holds[kindMultiLock], lockID)
	if err != nil {
		return Held{}, g.wrap(ctx, op, set, lockID, err)
	}
	defer rows.Close()
	var (
		h       Held
		expires int64
		now     int64
		n       int64
	)
	for rows.Next() {
		var (
			storage, user, fence sql.NullString
			exp, size            sql.NullInt64
			rowNow               int64
		)
		if err := rows.Scan(&storage, &user, &fence, &exp, &size, &rowNow); err != nil {
			return Held{}, g.wrap(ctx, op, set, lockID, err)
		}
		now = max(now, rowNow)
		if !storage.Valid {
			continue
		}
		if len(h.Fences) == 0 || exp.Int64 < expires {
			expires = exp.Int64
		}
		n = size.Int64
		h.Fences = append(h.Fences, multilock.KeyFence{Key: user.String, Fence: syncguard.Fence(fence.String)})
	}
	if err := rows.Err(); err != nil {
		return Held{}, g.wrap(ctx, op, set, lockID, err)
	}
	got := make([]string, len(h.Fences))
	for i, f := range h.Fences {
		got[i] = f.Key
	}
	slices.Sort(got)
	want := slices.Clone(keys)
	slices.Sort(want)
	switch {
	case len(h.Fences) == 0:
		return Held{}, lost(op, set, lockID, "no set has this lockId (released, taken over, or never acquired)")
	case int64(len(h.Fences)) != n:
		return Held{}, lost(op, set, lockID, fmt.Sprintf("this lockId holds %d of its set's %d keys (the others were taken over)", len(h.Fences), n))
	case !slices.Equal(got, want):
		return Held{}, &syncguard.Error{Op: op, Code: syncguard.CodeInvalidArgument, Key: set, LockID: lockID,
			Msg: "this lockId holds the lock of another set", Err: syncguard.ErrLockLost}
	case expires <= now:
		return Held{}, lost(op, set, lockID, fmt.Sprintf("expired %d ms ago by the server's clock", now-expires))
	}
	// Fences in the set's canonical order (ParseKeys'), the largest as Fence.
	order := make(map[string]int, len(keys))
	for i, k := range keys {
		order[k] = i
	}
	slices.SortFunc(h.Fences, func(a, b multilock.KeyFence) int { return order[a.Key] - order[b.Key] })
	for _, f := range h.Fences {
		h.Fence = max(h.Fence, f.Fence)
	}
	h.ExpiresAt, h.Now = time.UnixMilli(expires), time.UnixMilli(now)
	return h, nil
}
