package kit

import (
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/syncguard/syncguard-go/driver"
	"github.com/syncguard/syncguard-go/internal/rules"
	"github.com/syncguard/syncguard-go/syncguard"
)

// InvalidArg is an InvalidArgument error of op.
func InvalidArg(op, msg string) *syncguard.Error {
	return &syncguard.Error{Op: op, Code: syncguard.ErrInvalidArgument, Msg: msg}
}

// RuleErr reports a broken rule (internal/rules) of op as InvalidArgument.
func RuleErr(op string, err error) *syncguard.Error {
	var ae *rules.ArgError
	if errors.As(err, &ae) {
		return InvalidArg(op, ae.Msg)
	}
	return InvalidArg(op, err.Error())
}

// CheckLockID validates a lockId before any I/O.
func CheckLockID(op, id string) *syncguard.Error {
	if err := rules.ValidateLockID(id); err != nil {
		e := RuleErr(op, err)
		e.LockID = id
		return e
	}
	return nil
}

// TTLMillis is ttl in whole milliseconds, at least 1.
func TTLMillis(op string, ttl time.Duration) (int64, *syncguard.Error) {
	ms := ttl.Milliseconds()
	if ms < 1 {
		return 0, InvalidArg(op, fmt.Sprintf("ttl must be at least 1ms, got %v", ttl))
	}
	return ms, nil
}

// FailReason tells why a release or extend did nothing: the lease's row
// seen (its expiry) but not live, or none.
func FailReason(seen sql.NullInt64, now int64) string {
	if seen.Valid && !rules.IsLive(seen.Int64, now) {
		return syncguard.ReasonExpired
	}
	return syncguard.ReasonNotFound
}

// Config is a kind's reading of syncguard.Config: checked, with the
// pool's dialect found and the defaults filled in.
type Config struct {
	Table          string
	Dialect        driver.Dialect
	OneShot        []any // the dialect's driver.OneShot arguments, if it has them
	Identity       string
	NotifyDB       *sql.DB
	Logger         *slog.Logger
	ReleaseTimeout time.Duration
	DisablePrepare bool
}

// Resolve checks db and cfg for op (nil cfg: the defaults) and reads
// them; no I/O. Bad input is an InvalidArgument *syncguard.Error.
func Resolve(op string, db *sql.DB, cfg *syncguard.Config) (Config, error) {
	table, err := TableName(op, cfg)
	if err != nil {
		return Config{}, err
	}
	if db == nil {
		return Config{}, InvalidArg(op, "db must not be nil")
	}
	var c syncguard.Config
	if cfg != nil {
		c = *cfg
	}
	if len(c.Identity) > 256 {
		return Config{}, InvalidArg(op, fmt.Sprintf("Identity is %d bytes; at most 256 are allowed", len(c.Identity)))
	}
	if c.Dialect, err = FindDialect(op, db, c.Dialect); err != nil {
		return Config{}, err
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.ReleaseTimeout <= 0 {
		c.ReleaseTimeout = 5 * time.Second
	}
	r := Config{Table: table, Dialect: c.Dialect, Identity: c.Identity, NotifyDB: c.NotifyDB, Logger: c.Logger,
		ReleaseTimeout: c.ReleaseTimeout, DisablePrepare: c.DisablePrepare}
	if o, ok := c.Dialect.(driver.OneShot); ok {
		r.OneShot = o.OneShotArgs()
	}
	return r, nil
}

// FindDialect is d, else the dialect registered for db's driver (db not
// nil); op names the call in an error.
func FindDialect(op string, db *sql.DB, d driver.Dialect) (driver.Dialect, error) {
	if d != nil {
		return d, nil
	}
	if d, ok := driver.Lookup(db.Driver()); ok {
		return d, nil
	}
	return nil, InvalidArg(op, fmt.Sprintf("no syncguard dialect registered for database/sql driver %T: import an adapter "+
		`(_ "github.com/syncguard/syncguard-go/pq" or _ "github.com/syncguard/syncguard-go/pgxstd") or set Config.Dialect (registered: %s)`,
		db.Driver(), strings.Join(driver.Registered(), ", ")))
}

// CheckKey derives key's storage keys, or reports the rule it breaks as
// InvalidArgument (with Key), before any I/O.
func CheckKey(op, key string) (rules.Key, error) {
	k, err := rules.DeriveKey(key)
	if err != nil {
		e := RuleErr(op, err)
		e.Key = key
		return rules.Key{}, e
	}
	return k, nil
}
