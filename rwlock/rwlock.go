package rwlock

import (
	"context"
	"database/sql"
	"embed"
	"log/slog"
	"time"

	"github.com/syncguard/syncguard-go/internal/kit"
	"github.com/syncguard/syncguard-go/internal/rules"
	"github.com/syncguard/syncguard-go/internal/waiting"
	"github.com/syncguard/syncguard-go/syncguard"
)

// RWLock is the read-write locks of one lock table: Shared and Exclusive
// return its two Lockers. It holds no connection besides the LISTEN
// connection of its waiters (see Close); safe for concurrent use.
type RWLock struct {
	k *kit.Base

	sqlAcquire, sqlRelease, sqlExtend, sqlHolders, sqlWriterFence, sqlList string

	shared, exclusive *Locker
}

// New returns the read-write locks of db with the rules of cfg (nil: the
// defaults): TableName (Tables), Dialect, Identity, NotifyDB, Logger and
// ReleaseTimeout, as syncguard.New reads them. New does no I/O: call
// SetupSchema once (or apply SchemaSQL) before use. Bad input is an
// InvalidArgument *syncguard.Error.
func New(db *sql.DB, cfg *syncguard.Config) (*RWLock, error) {
	c, err := kit.Resolve("rwlock.new", db, cfg)
	if err != nil {
		return nil, err
	}
	r := func(file string) string { return kit.StripComments(render(file, c.Table)) }
	rw := &RWLock{k: kit.NewBase("rwlock", db, c), sqlAcquire: r("call_acquire.sql"), sqlRelease: r("call_release.sql"),
		sqlExtend: r("extend.sql"), sqlHolders: r("holders.sql"), sqlWriterFence: r("writer_fence.sql"), sqlList: r("list.sql")}
	h, k, w := Tables(c.Table)
	rw.k.Inline, rw.k.ReadCommitted, rw.k.Tables = true, true, []string{h, k, w} // unprepared: safe behind a pooler
	rw.shared, rw.exclusive = &Locker{rw: rw}, &Locker{rw: rw, exclusive: true}
	for _, l := range []*Locker{rw.shared, rw.exclusive} {
		l.ops = kit.Ops{Acquire: l.acquire, Release: l.Release, Leave: rw.leave}
	}
	return rw, nil
}

// Shared returns the Locker of shared (read) leases: any number at once,
// none while a writer holds the key or waits ahead.
func (rw *RWLock) Shared() *Locker { return rw.shared }

// Exclusive returns the Locker of exclusive (write) leases: one at a time,
// alone.
func (rw *RWLock) Exclusive() *Locker { return rw.exclusive }

// Close closes the LISTEN connection that wakes waiting Lock calls, if one
// is open; not the *sql.DB. The RWLock stays usable; its waits then poll.
func (rw *RWLock) Close() error { return rw.k.Close() }

// Holder is a live lease on a key, as Holders returns it: diagnostics,
// the answer describes an instant that has passed when it arrives.
type Holder struct {
	Exclusive  bool            // a writer's lease
	LockIDHash string          // syncguard.HashKey of the lockId
	Fence      syncguard.Fence // a writer's fence; a reader's writer generation
	ExpiresAt  time.Time       // server time
	AcquiredAt time.Time       // server time
	Identity   string          // the holder's identity, "" when none was set
	lockID     string
}

// Holders returns the live leases of key, oldest first.
func (rw *RWLock) Holders(ctx context.Context, key string) ([]Holder, error) {
	const op = "rwlock.holders"
	k, err := kit.CheckKey(op, key)
	if err != nil {
		return nil, err
	}
	rows, _, err := rw.holders(ctx, op, k.Storage, "")
	return rows, kit.SetKey(err, key)
}

// Holding is a live lease of any key, as List returns it (a Holder's
// diagnostics).
type Holding struct {
	Key    string // the key, in NFC form
	Holder        // the lease: side, fence, times, identity, lockId's hash
}

// List returns every live lease of every key, shared and exclusive,
// newest first (then by key and lockId), in one statement, for the CLI's
// status and ls. It shows the keys, which may hold personal data: do not
// log it in production.
func (rw *RWLock) List(ctx context.Context) ([]*Holding, error) {
	return kit.List(ctx, rw.k, "rwlock.list", rw.sqlList, nil, func(scan func(...any) error) (*Holding, error) {
		var (
			h           Holding
			f, acq, exp int64
		)
		err := scan(&h.Key, &h.Exclusive, &h.lockID, &f, &acq, &exp, &h.Identity)
		h.LockIDHash, h.Fence, h.AcquiredAt, h.ExpiresAt = rules.HashKey(h.lockID), kit.Fence(f), time.UnixMilli(acq), time.UnixMilli(exp)
		return &h, err
	})
}

// WriterFence returns the latest writer fence issued for key (all zeros:
// no writer yet). A reader compares it with its lease's Fence (its writer
// generation): greater means a writer was admitted after the reader.
func (rw *RWLock) WriterFence(ctx context.Context, key string) (syncguard.Fence, error) {
	const op = "rwlock.writerFence"
	k, err := kit.CheckKey(op, key)
	if err != nil {
		return "", err
	}
	var n int64
	if err := rw.k.Row(ctx, rw.sqlWriterFence, []any{k.Storage}, &n); err != nil {
		return "", rw.k.WrapKey(ctx, op, key, "", err)
	}
	return kit.Fence(n), nil
}

// Locker is one side of an RWLock: Shared or Exclusive. It is a
// syncguard.LockBackend with a queue (Queue), so syncguard.Lock and
// WithLock give its leases a TTL, AutoExtend, the loss signal and a queue
// place. A lease's Fence is, for a writer, its writer fence (strictly
// increasing per key); for a reader, its writer generation (the key's
// latest writer fence when it was admitted).
type Locker struct {
	rw        *RWLock
	exclusive bool
	ops       kit.Ops // of its waiters
}

var (
	_ syncguard.LockBackend = (*Locker)(nil)
	_ kit.Queuer            = (*Locker)(nil)
)

// IsExclusive reports whether l is the Exclusive side.
func (l *Locker) IsExclusive() bool { return l.exclusive }

// RWLock returns the RWLock that l belongs to.
func (l *Locker) RWLock() *RWLock { return l.rw }

// LeaseLogger is the logger of leases taken on l (Config.Logger).
func (l *Locker) LeaseLogger() *slog.Logger { return l.rw.k.Logger }

// Acquire implements syncguard.Locker: one attempt, which never queues
// (it counts as arriving after every live waiter). A writer is admitted
// when no lease is live and nobody waits; a reader when no writer holds
// the key or waits for it.
func (l *Locker) Acquire(ctx context.Context, key string, ttl time.Duration) (syncguard.AcquireResult, error) {
	return l.acquire(ctx, key, ttl, l.rw.k.Identity, nil)
}

// Release implements syncguard.Locker: deletes the lease if lockID holds
// it and it is live. A writer's release hands what it frees to the head of
// the queue (the run of readers there, or the writer) in the same commit;
// a reader's, which runs beside other readers' statements, notifies the
// writer at the head when no other lease is left, and the writer's own
// attempt takes the key.
func (l *Locker) Release(ctx context.Context, lockID string) (syncguard.ReleaseResult, error) {
	return l.rw.release(ctx, lockID, "")
}

// IsLocked implements syncguard.LockBackend: whether a live lease would
// turn this side's Acquire away: any lease for Exclusive, a writer's for
// Shared. (Waiters may turn it away too.)
func (l *Locker) IsLocked(ctx context.Context, key string) (bool, error) {
	info, err := l.lookup(ctx, "isLocked", key)
	return info != nil, err
}

// LookupKey implements syncguard.LockBackend: the live lease on key that
// turns this side away: the writer's; for Exclusive, else the reader's
// that expires last. nil when there is none.
func (l *Locker) LookupKey(ctx context.Context, key string) (*syncguard.LockInfo, error) {
	return l.lookup(ctx, "lookup", key)
}

// LookupID implements syncguard.LockBackend: the live lease of lockID,
// shared or exclusive; nil when there is none.
func (l *Locker) LookupID(ctx context.Context, lockID string) (*syncguard.LockInfo, error) {
	const op = "lookup"
	if err := kit.CheckLockID(op, lockID); err != nil {
		return nil, err
	}
	hs, key, err := l.rw.holders(ctx, op, "", lockID)
	if err != nil || len(hs) == 0 {
		return nil, err
	}
	return info(hs[0], key), nil
}

func (l *Locker) lookup(ctx context.Context, op, key string) (*syncguard.LockInfo, error) {
	k, err := kit.CheckKey(op, key)
	if err != nil {
		return nil, err
	}
	hs, _, err := l.rw.holders(ctx, op, k.Storage, "")
	var pick *Holder
	for i := range hs {
		if h := &hs[i]; h.Exclusive || l.exclusive && (pick == nil || !pick.Exclusive && h.ExpiresAt.After(pick.ExpiresAt)) {
			pick = h
		}
	}
	if pick == nil || err != nil {
		return nil, kit.SetKey(err, key)
	}
	return info(*pick, k.Norm), nil
}

func info(h Holder, key string) *syncguard.LockInfo {
	return &syncguard.LockInfo{KeyHash: rules.HashKey(key), LockIDHash: h.LockIDHash, ExpiresAt: h.ExpiresAt,
		AcquiredAt: h.AcquiredAt, Fence: h.Fence, Identity: h.Identity}
}

// Capabilities implements syncguard.LockBackend.
func (l *Locker) Capabilities() syncguard.Capabilities { return kit.Capabilities }

// holders reads the live leases of a storage key (or of one lockId).
func (rw *RWLock) holders(ctx context.Context, op, storage, lockID string) ([]Holder, string, error) {
	var (
		out []Holder
		key string
	)
	err := rw.k.Each(ctx, op, rw.sqlHolders, []any{storage, lockID}, func(scan func(...any) error) error {
		var (
			h                Holder
			id               string
			exp, acq, f, now int64
		)
		err := scan(&id, &h.Exclusive, &exp, &acq, &f, &key, &h.Identity, &now)
		h.LockIDHash, h.Fence, h.lockID = rules.HashKey(id), kit.Fence(f), id
		h.ExpiresAt, h.AcquiredAt = time.UnixMilli(exp), time.UnixMilli(acq)
		out = append(out, h)
		return err
	})
	if err != nil {
		return nil, "", err
	}
	return out, key, nil
}

// Revoke forces every live lease of key out, shared and exclusive (an
// operator's last resort: the CLI's revoke), as its holder's release
// would (kit.Revoke), and returns those it ended, oldest first; a holder
// learns it at its next extend (syncguard.ErrLockLost).
func (rw *RWLock) Revoke(ctx context.Context, key string) ([]*Holding, error) {
	hs, err := rw.Holders(ctx, key)
	if err != nil {
		return nil, err
	}
	k, _ := rules.DeriveKey(key) // valid: Holders checked it
	in := make([]*Holding, len(hs))
	for i, h := range hs {
		in[i] = &Holding{Key: k.Norm, Holder: h}
	}
	return kit.Revoke(ctx, in, func(ctx context.Context, h *Holding) (syncguard.ReleaseResult, error) {
		return rw.release(ctx, h.lockID, "")
	})
}

//go:embed sql/*.sql
var sqlFiles embed.FS

// Names returns the tables, indexes and functions of the read-write lock
// of lock table table, by their placeholder in the statement files,
// unquoted: "<table>_rw" (leases), "<table>_rw_keys" (writer fences),
// "<table>_rw_waiters" (the queue) and the functions "<table>_rw_*".
func names(table string) map[string]string {
	return map[string]string{
		"holders":           table + "_rw",
		"leases":            table + "_rw",
		"holders_id_index":  "idx_" + table + "_rwid",
		"holders_key_index": "idx_" + table + "_rwkey",
		"keys":              table + "_rw_keys",
		"keys_index":        "idx_" + table + "_rwfkey",
		"waiters":           table + "_rw_waiters",
		"waiters_id_index":  "idx_" + table + "_rwwid",
		"waiters_key_index": "idx_" + table + "_rwwkey",
		"grant_fn":          table + "_rw_grant",
		"hint_fn":           table + "_rw_hint",
		"lock_fn":           table + "_rw_lock",
		"acquire_fn":        table + "_rw_acquire",
		"release_fn":        table + "_rw_release",
	}
}

// schema is the read-write lock's SQL.
var schema = &kit.Schema{Kind: "rwlock", Files: sqlFiles, Names: names, DDL: []string{"schema.sql", "functions.sql"},
	Channel: channelPrefix,
	LockID:  0x72776c6f636b3031} // "rwlock01"

// channelPrefix is the notification prefix of the read-write locks of
// lock table table: never the mutex's channels.
func channelPrefix(table string) string { return waiting.Prefix(table + "_rw") }

func render(file, table string) string { return schema.Render(file, table) }

// SchemaSQL returns the DDL that SetupSchema runs, for migration tools:
// the read-write lock's tables (Tables) with their indexes, and its SQL
// functions ("<TableName>_rw_acquire", "_rw_release", "_rw_grant",
// "_rw_hint", "_rw_lock"), idempotent. cfg may be nil for the defaults;
// only TableName is read. The mutex's tables are syncguard.SchemaSQL's.
func SchemaSQL(cfg *syncguard.Config) (string, error) { return schema.SQL("rwlock.schema", cfg) }

// SetupSchema creates the read-write lock's tables and functions
// (kit.Schema.Setup: idempotent, safe to call concurrently, one query
// when all exist). Using the lock needs SELECT, INSERT, UPDATE and DELETE
// on the three tables and EXECUTE on the functions (PUBLIC's by default).
func SetupSchema(ctx context.Context, db *sql.DB, cfg *syncguard.Config) error {
	return schema.Setup(ctx, db, cfg)
}

// Tables returns the names of the read-write lock's tables for the lock
// table table (syncguard.Config.TableName): holders (a row per live
// lease), keys (a writer fence counter per key) and waiters (the queue).
// They are a namespace of their own: a key locked here shares no row and
// no fence counter with the mutex of the same name.
func Tables(table string) (holders, keys, waiters string) {
	n := names(table)
	return n["holders"], n["keys"], n["waiters"]
}

// TableName reports the lock table name (syncguard.Config.TableName,
// resolved) that rw's tables are named from (Tables).
func (rw *RWLock) TableName() string { return rw.k.Table }
