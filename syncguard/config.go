package syncguard

import (
	"database/sql"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/syncguard/syncguard-go/driver"
	"github.com/syncguard/syncguard-go/internal/rules"
)

const defaultReleaseTimeout = 5 * time.Second

// Config configures a Backend. The zero value (or a nil *Config) is valid
// and means the defaults documented on each field.
type Config struct {
	// TableName is the lock table. Default "syncguard_locks", the name
	// every SyncGuard implementation uses. It must match
	// ^[A-Za-z_][A-Za-z0-9_]*$ and be at most 51 bytes, so that its index
	// names ("idx_<name>_lock_id") fit PostgreSQL's 63-byte limit. Names are
	// quoted in SQL: mixed case is kept as written.
	TableName string
	// FenceTableName is the fence counter table. Default
	// "syncguard_fence_counters". Same rules as TableName, and it must
	// differ from TableName and from the names of the indexes SetupSchema
	// creates (idx_<TableName>_lock_id, idx_<TableName>_expires,
	// <TableName>_pkey); TableName must not be <FenceTableName>_pkey.
	FenceTableName string
	// CleanupInIsLocked lets IsLocked delete, in the background, the row of
	// a key whose lock expired more than 2 s ago, at most about once per
	// CleanupInterval per Backend, never touching fence counters or
	// IsLocked's answer. Default false: IsLocked is a pure read.
	CleanupInIsLocked bool
	// CleanupInterval rate-limits CleanupInIsLocked. Default 1 s.
	CleanupInterval time.Duration
	// Logger receives warnings (fence above the warning threshold, failed
	// background cleanup). Default slog.Default(). Keys and lockIds are
	// logged only as HashKey values.
	Logger *slog.Logger
	// Dialect says which database/sql driver the *sql.DB uses. Default:
	// found from db.Driver() among the dialects the imported adapters (pq,
	// pgxstd) registered. Set it when the driver is wrapped (tracing).
	Dialect driver.Dialect
	// DisablePrepare runs every statement unprepared from the start: still
	// one round trip and safe behind a transaction-mode pooler, but parsed
	// and planned every time. Default false: statements are prepared once
	// per connection, and a Backend turns that off for good, logged once,
	// when a probe before its first prepare finds a pooler or a pooler loses
	// a prepared statement (26000, 42P05). The probe needs a dialect that
	// reads the backend pid (driver.BackendPIDReader: both adapters, not
	// through a driver wrapper); without one, set DisablePrepare behind a
	// transaction-mode pooler, where a prepared statement can run as another
	// client's of the same name. See "Statements and round trips" in
	// docs/design.md.
	DisablePrepare bool
	// Identity names this process as the holder of the locks it takes
	// (DefaultIdentity gives "host:pid"): LookupKey, LookupID and List show
	// it. LockOptions.Identity overrides it for one lock. Default "": none
	// is stored. At most 256 bytes. See "Holder identity" in docs/usage.md.
	Identity string
	// NotifyDB is the pool waiting's notifications travel through: the
	// LISTEN connection that wakes Lock, WithLock and WatchKey is opened on
	// it (with the dialect of its driver), and a release on the pool that
	// hands a key over sends the wake-up through it after its commit.
	// Default nil: db, the wake-up in the release's own commit. Set it when
	// db cannot carry them well: behind a transaction-mode pooler (a pool
	// that reaches PostgreSQL directly, or a session-mode pool), or when
	// other programs LISTEN in db's database (a pool on a database of its
	// own: PostgreSQL wakes every listening session of a database at each
	// notifying commit there). Every process waiting on the same locks
	// must use the same one. See "Waiting at scale" in docs/design.md.
	NotifyDB *sql.DB
	// ReleaseTimeout bounds every release this package runs on its own,
	// detached from the caller's cancellation: after WithLock's fn and in
	// Lease.Close (unless LockOptions.ReleaseTimeout is set), of an acquire
	// of unknown outcome, and the CleanupInIsLocked delete. Default 5 s.
	ReleaseTimeout time.Duration
	// Tracer, if set, observes every operation of the Backend (and of its
	// WithTx views) and the waits and holdings of Lock and WithLock on it
	// (found through wrappers, unless LockOptions.Tracer is set): see
	// Tracer. otelsyncguard.New gives one for OpenTelemetry, telemetry.New
	// one for the spec's LockEvent. Default nil: nothing is traced, at no
	// cost. The lock kinds (semaphore, rwlock, multilock) do not read it:
	// pass LockOptions.Tracer to their Lock and WithLock.
	Tracer Tracer
}

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// maxTableName keeps "idx_" + name + "_lock_id" within 63 bytes.
const maxTableName = 63 - len("idx_") - len("_lock_id")

// resolved is a Config with its defaults applied.
type resolved struct{ Config }

func (c *Config) resolve() (resolved, error) {
	var r resolved
	if c != nil {
		r.Config = *c
	}
	if err := checkIdentity("new", "Identity", r.Identity); err != nil {
		return r, err
	}
	if r.TableName == "" {
		r.TableName = rules.DefaultTable
	}
	if r.FenceTableName == "" {
		r.FenceTableName = rules.DefaultFenceTable
	}
	if r.CleanupInterval <= 0 {
		r.CleanupInterval = time.Second
	}
	if r.ReleaseTimeout <= 0 {
		r.ReleaseTimeout = defaultReleaseTimeout
	}
	for _, n := range []struct{ field, name string }{{"TableName", r.TableName}, {"FenceTableName", r.FenceTableName}} {
		if err := checkIdent(n.field, n.name); err != nil {
			return r, err
		}
	}
	if strings.EqualFold(r.TableName, r.FenceTableName) {
		return r, invalidArg("new", fmt.Sprintf("FenceTableName must differ from TableName (both %q); sharing a table would let lock cleanup delete fence counters", r.TableName))
	}
	if err := checkCollisions(r.TableName, r.FenceTableName); err != nil {
		return r, err
	}
	return r, nil
}

// checkCollisions rejects table names of another object SetupSchema
// creates, which CREATE ... IF NOT EXISTS would skip silently.
func checkCollisions(table, fenceTable string) error {
	objects := []struct{ name, what string }{
		{"idx_" + table + "_lock_id", "the lock table's lock_id index"},
		{"idx_" + table + "_expires", "the lock table's expires_at_ms index"},
		{table + "_pkey", "the lock table's primary-key index"},
		{waitersTable(table), "the waiters table"},
		{"idx_" + table + "_wid", "the waiters table's lock_id index"},
		{"idx_" + table + "_wkey", "the waiters table's key index"},
		{holdersTable(table), "the holders table"},
		{"idx_" + table + "_hkey", "the holders table's key index"},
	}
	for _, o := range objects {
		if fenceTable == o.name {
			return invalidArg("new", fmt.Sprintf("FenceTableName %q is the name of %s (TableName %q); SetupSchema would skip creating one of them: choose another name", fenceTable, o.what, table))
		}
	}
	if table == fenceTable+"_pkey" {
		return invalidArg("new", fmt.Sprintf("TableName %q is the name of the fence table's primary-key index (FenceTableName %q); SetupSchema would skip creating one of them: choose another name", table, fenceTable))
	}
	return nil
}

func checkIdent(field, name string) error {
	if !identRE.MatchString(name) {
		return invalidArg("new", fmt.Sprintf("%s %q is not a plain SQL identifier (want ^[A-Za-z_][A-Za-z0-9_]*$)", field, name))
	}
	if len(name) > maxTableName {
		return invalidArg("new", fmt.Sprintf("%s %q is %d bytes; at most %d are allowed so that index names stay within PostgreSQL's 63-byte limit", field, name, len(name), maxTableName))
	}
	return nil
}

func waitersTable(table string) string { return table + "_waiters" }

func holdersTable(table string) string { return table + "_holders" }

const maxIdentity = 256

func checkIdentity(op, field, v string) error {
	if len(v) > maxIdentity {
		return invalidArg(op, fmt.Sprintf("%s is %d bytes; at most %d are allowed", field, len(v), maxIdentity))
	}
	return nil
}

// DefaultIdentity returns "host:pid", this process's host name and process
// id, for Config.Identity or LockOptions.Identity.
func DefaultIdentity() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown-host"
	}
	return host + ":" + strconv.Itoa(os.Getpid())
}
