package syncguard

import (
	"context"
	"database/sql"
	"time"

	"github.com/syncguard/syncguard-go/internal/pooler"
	"github.com/syncguard/syncguard-go/internal/rules"
)

// ListOptions selects what Backend.List returns. The zero value lists the
// live locks, at most 100, with hashed keys and lockIds.
type ListOptions struct {
	// Limit is the most locks returned, newest acquisition first.
	// Default 100; negative means no limit.
	Limit int
	// Expired also returns the rows of expired locks (left until their key
	// is acquired again); LockList.Live tells the two apart.
	Expired bool
	// Raw fills LockInfo.Key and .LockID. Default false: only the
	// HashKey forms. The raw values are sensitive (see LockInfo).
	Raw bool
}

// LockList is the answer of Backend.List: one consistent read.
type LockList struct {
	// Now is the server's clock at the read. Judge ExpiresAt against it,
	// never against the local clock.
	Now time.Time
	// Locks are the rows, newest acquisition first (then by key). Key and
	// LockID are empty unless ListOptions.Raw was set.
	Locks []LockInfo
	// More is true when ListOptions.Limit left rows out.
	More bool
}

// Live reports whether info's lock was live at l.Now, by the spec's
// liveness rule (expires_at_ms > now_ms - 1000).
func (l *LockList) Live(info LockInfo) bool {
	return rules.IsLive(info.ExpiresAt.UnixMilli(), l.Now.UnixMilli())
}

const defaultListLimit = 100

// List reads the locks in the lock table in one read-only statement (opts
// nil: the defaults). Like the lookups it is a diagnostic: the answer
// describes an instant that has passed when it arrives.
func (b *Backend) List(ctx context.Context, opts *ListOptions) (*LockList, error) {
	const op = "list"
	var o ListOptions
	if opts != nil {
		o = *opts
	}
	if o.Limit == 0 {
		o.Limit = defaultListLimit
	}
	var limit any // NULL: no limit
	if o.Limit > 0 {
		limit = int64(o.Limit) + 1 // one more, to tell whether there are more
	}
	if e := ctxErr(ctx, op); e != nil {
		return nil, e
	}
	text := b.shared.sql.list
	if b.shared.noHolders.Load() {
		text = b.shared.sql.listPlain
	}
	rows, err := b.inspector().QueryContext(ctx, text, o.Expired, limit)
	if err != nil && text == b.shared.sql.list && ctx.Err() == nil && b.shared.holdersLost(err) {
		rows, err = b.inspector().QueryContext(ctx, b.shared.sql.listPlain, o.Expired, limit)
	}
	if err != nil {
		return nil, b.shared.cl.wrap(ctx, op, err)
	}
	defer rows.Close()
	list := &LockList{Locks: []LockInfo{}}
	for rows.Next() {
		var now int64
		var key, id, fence, ident sql.NullString
		var acquired, expires sql.NullInt64
		if err := rows.Scan(&now, &key, &id, &fence, &acquired, &expires, &ident); err != nil {
			return nil, b.shared.cl.wrap(ctx, op, err)
		}
		list.Now = msToTime(now)
		if !id.Valid {
			continue // the one row of an empty answer
		}
		d := LockInfo{
			KeyHash: rules.HashKey(key.String), LockIDHash: rules.HashKey(id.String),
			ExpiresAt: msToTime(expires.Int64), AcquiredAt: msToTime(acquired.Int64), Fence: Fence(fence.String),
			Identity: ident.String,
		}
		if o.Raw {
			d.Key, d.LockID = key.String, id.String
		}
		list.Locks = append(list.Locks, d)
	}
	if err := rows.Err(); err != nil {
		return nil, b.shared.cl.wrap(ctx, op, err)
	}
	if o.Limit > 0 && len(list.Locks) > o.Limit {
		list.Locks, list.More = list.Locks[:o.Limit], true
	}
	return list, nil
}

// LastFence returns the fence of key's latest successful acquire (its
// fence counter, never deleted), "" when key was never acquired, and the
// server's clock at the read: the next acquire of key gets a larger one.
// It is read-only and validates key first, as Acquire does.
func (b *Backend) LastFence(ctx context.Context, key string) (Fence, time.Time, error) {
	const op = "lastFence"
	k, e := checkKey(op, key)
	if e != nil {
		return "", time.Time{}, e
	}
	if e := ctxErr(ctx, op); e != nil {
		e.Key = key
		return "", time.Time{}, e
	}
	var now int64
	var n sql.NullInt64
	if err := pooler.QueryRow(ctx, b.inspector(), b.shared.sql.lastFence, []any{k.Fence}, &now, &n); err != nil {
		e := b.shared.cl.wrap(ctx, op, err)
		e.Key = key
		return "", time.Time{}, e
	}
	if !n.Valid {
		return "", msToTime(now), nil
	}
	f, err := rules.FormatFence(n.Int64)
	if err != nil {
		return "", time.Time{}, &Error{Op: op, Code: ErrInternal, Key: key, Msg: "fence counter out of range: " + err.Error()}
	}
	return Fence(f), msToTime(now), nil
}

// inspector runs inspections one-shot (they are rare) on the transaction
// or the pool.
func (b *Backend) inspector() pooler.Querier {
	var on pooler.Querier = b.shared.db
	if b.tx != nil {
		on = b.tx
	}
	return pooler.Unprepared(on, b.shared.oneShotArgs)
}

// LookupKey implements LockBackend (the spec's getByKey). Like every lookup
// it is for diagnostics, never a check before a mutation (see LockInfo).
func (b *Backend) LookupKey(ctx context.Context, key string) (*LockInfo, error) {
	return sanitized(b.lookup(ctx, key, "", false))
}

// LookupID implements LockBackend (the spec's getById; != nil is its
// owns(id), with the same caveat: ownership may change at once).
func (b *Backend) LookupID(ctx context.Context, lockID string) (*LockInfo, error) {
	return sanitized(b.lookup(ctx, "", lockID, true))
}

// lookup is the lookup of key, or of lockID, traced.
func (b *Backend) lookup(ctx context.Context, key, lockID string, byID bool) (*LockInfo, error) {
	var o opTrace
	if b.shared.cfg.Tracer != nil {
		o, ctx = b.startOp(ctx, "lookup", key, lockID)
	}
	var d *LockInfo
	var err error
	if !byID {
		d, err = b.lookupKey(ctx, key)
	} else {
		d, err = b.lookupID(ctx, lockID)
	}
	o.end(d != nil, "", "", err)
	return d, err
}

// sanitized is d without its raw key and lockId.
func sanitized(d *LockInfo, err error) (*LockInfo, error) {
	if d == nil || err != nil {
		return nil, err
	}
	d.Key, d.LockID = "", ""
	return d, nil
}

// LookupKeyDebug is LookupKey with the raw key and lockId (the spec's
// getByKeyRaw). The result is sensitive; see LockInfo.Key.
func (b *Backend) LookupKeyDebug(ctx context.Context, key string) (*LockInfo, error) {
	return b.lookup(ctx, key, "", false)
}

func (b *Backend) lookupKey(ctx context.Context, key string) (*LockInfo, error) {
	const op = "lookup"
	k, e := checkKey(op, key)
	if e != nil {
		return nil, e
	}
	r, e := b.readRow(ctx, op, false, k.Storage)
	if e != nil {
		e.Key = key
		return nil, e
	}
	return r.info(), nil
}

// LookupIDDebug is LookupID with the raw key and lockId (the spec's
// getByIdRaw). The result is sensitive; see LockInfo.Key.
func (b *Backend) LookupIDDebug(ctx context.Context, lockID string) (*LockInfo, error) {
	return b.lookup(ctx, "", lockID, true)
}

func (b *Backend) lookupID(ctx context.Context, lockID string) (*LockInfo, error) {
	const op = "lookup"
	if e := checkLockID(op, lockID); e != nil {
		return nil, e
	}
	r, e := b.readRow(ctx, op, true, lockID)
	if e != nil {
		e.LockID = lockID
		return nil, e
	}
	if !r.lockID.Valid || r.lockID.String != lockID {
		return nil, nil
	}
	return r.info(), nil
}

func (r *lockRow) info() *LockInfo {
	if !r.live() {
		return nil
	}
	return &LockInfo{
		KeyHash:    rules.HashKey(r.userKey.String),
		LockIDHash: rules.HashKey(r.lockID.String),
		ExpiresAt:  msToTime(r.expires.Int64),
		AcquiredAt: msToTime(r.acquired.Int64),
		Fence:      Fence(r.fence.String),
		Identity:   r.identity.String,
		Key:        r.userKey.String,
		LockID:     r.lockID.String,
	}
}
