package syncguardtest

import (
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	"errors"
	"time"

	"github.com/syncguard/syncguard-go/driver"
	"github.com/syncguard/syncguard-go/internal/rules"
	"github.com/syncguard/syncguard-go/syncguard"
)

// validator gives the Backend the real backend's validation, so that there
// is one home for each rule (key length after NFC, NUL bytes, UTF-8, the
// lockId format, the 1 ms ttl minimum) and the errors are the same values.
//
// It holds a real *syncguard.Backend on a database that cannot be reached,
// and only ever calls it with a context that has already ended: the real
// backend validates its input first and then checks the context before any
// I/O, so it answers with the validation error, or, for valid input, with
// the context's error, and never touches the (absent) database.
type validator struct {
	real *syncguard.Backend
}

// done is a context that has ended.
var done = func() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}()

func newValidator() *validator {
	db := sql.OpenDB(noDB{})
	real, err := syncguard.New(db, &syncguard.Config{Dialect: noDialect{}})
	if err != nil {
		panic("syncguardtest: " + err.Error()) // the default configuration is valid
	}
	// Closed at once: the real backend checks the context before any I/O,
	// so it never needs the pool, and a closed *sql.DB leaves no goroutine
	// behind (a testing/synctest bubble that made the Backend can end).
	db.Close()
	return &validator{real: real}
}

// probe runs op on the real backend and returns its validation error, or
// ctx's error (as the real backend reports it) when ctx has ended, or nil.
func probe(ctx context.Context, op func(ctx context.Context) error) error {
	if ctx.Err() != nil {
		return op(ctx) // validation error, else ctx's own error
	}
	err := op(done)
	if syncguard.CodeOf(err) == syncguard.ErrAborted {
		return nil // valid: it got as far as the context check
	}
	return err
}

func (v *validator) acquire(ctx context.Context, key string, ttl time.Duration) (string, error) {
	if err := probe(ctx, func(ctx context.Context) error {
		_, err := v.real.Acquire(ctx, key, ttl)
		return err
	}); err != nil {
		return "", err
	}
	return normalize(key)
}

func (v *validator) release(ctx context.Context, lockID string) error {
	return probe(ctx, func(ctx context.Context) error {
		_, err := v.real.Release(ctx, lockID)
		return err
	})
}

func (v *validator) extend(ctx context.Context, lockID string, ttl time.Duration) error {
	return probe(ctx, func(ctx context.Context) error {
		_, err := v.real.Extend(ctx, lockID, ttl)
		return err
	})
}

func (v *validator) isLocked(ctx context.Context, key string) (string, error) {
	if err := probe(ctx, func(ctx context.Context) error {
		_, err := v.real.IsLocked(ctx, key)
		return err
	}); err != nil {
		return "", err
	}
	return normalize(key)
}

func (v *validator) lookupKey(ctx context.Context, key string) (string, error) {
	if err := probe(ctx, func(ctx context.Context) error {
		_, err := v.real.LookupKey(ctx, key)
		return err
	}); err != nil {
		return "", err
	}
	return normalize(key)
}

func (v *validator) lookupID(ctx context.Context, lockID string) error {
	return probe(ctx, func(ctx context.Context) error {
		_, err := v.real.LookupID(ctx, lockID)
		return err
	})
}

// key validates key as op would and returns its normalized form.
func (v *validator) key(ctx context.Context, op Op, key string) (string, error) {
	if op == OpAcquire {
		return v.acquire(ctx, key, time.Second)
	}
	return v.isLocked(ctx, key)
}

// ctxErr is the error the real backend returns for c when ctx has ended.
func (v *validator) ctxErr(ctx context.Context, c Call) error {
	var err error
	switch c.Op {
	case OpAcquire:
		_, err = v.real.Acquire(ctx, c.Key, time.Second)
	case OpRelease:
		_, err = v.real.Release(ctx, c.LockID)
	case OpExtend:
		_, err = v.real.Extend(ctx, c.LockID, time.Second)
	case OpIsLocked:
		_, err = v.real.IsLocked(ctx, c.Key)
	default:
		if c.Key != "" {
			_, err = v.real.LookupKey(ctx, c.Key)
		} else {
			_, err = v.real.LookupID(ctx, c.LockID)
		}
	}
	return err
}

// normalize is the key's identity: its NFC form (the real backend's
// storage key is derived from it one to one).
func normalize(key string) (string, error) { return rules.NormalizeKey(key) }

// noDB is a database/sql connector that never connects.
type noDB struct{}

var errNoIO = errors.New("syncguardtest: the validating backend never does I/O")

func (noDB) Connect(context.Context) (sqldriver.Conn, error) { return nil, errNoIO }
func (noDB) Driver() sqldriver.Driver                        { return noDriver{} }

type noDriver struct{}

func (noDriver) Open(string) (sqldriver.Conn, error) { return nil, errNoIO }

// noDialect reads no driver errors (there are none).
type noDialect struct{}

func (noDialect) Name() string                   { return "syncguardtest" }
func (noDialect) Inspect(error) driver.ErrorInfo { return driver.ErrorInfo{} }
