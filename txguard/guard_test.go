package txguard

import (
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	"errors"
	"strings"
	"testing"

	"github.com/DATA-DOG/go-sqlmock"

	"github.com/syncguard/syncguard-go/driver"
	"github.com/syncguard/syncguard-go/multilock"
	"github.com/syncguard/syncguard-go/semaphore"
	"github.com/syncguard/syncguard-go/syncguard"
	"github.com/syncguard/syncguard-go/syncguardtest"
)

type pgErr struct{ state, msg string }

func (e *pgErr) Error() string { return "pg error " + e.state + ": " + e.msg }

type fakeDialect struct{}

func (fakeDialect) Name() string { return "fake" }
func (fakeDialect) Inspect(err error) driver.ErrorInfo {
	var pe *pgErr
	if errors.As(err, &pe) {
		return driver.ErrorInfo{SQLState: pe.state, Severity: "ERROR", Message: pe.msg}
	}
	return driver.ErrorInfo{}
}

const lockID = "AAAAAAAAAAAAAAAAAAAAAA"

func newMock(t *testing.T) (*Guard, *sql.Tx, sqlmock.Sqlmock) {
	t.Helper()
	db, mock, err := sqlmock.New(sqlmock.QueryMatcherOption(sqlmock.QueryMatcherEqual))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	g, err := New(db, &syncguard.Config{Dialect: fakeDialect{}})
	if err != nil {
		t.Fatal(err)
	}
	mock.ExpectBegin()
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	return g, tx, mock
}

func wantCode(t *testing.T, err error, code syncguard.Code) *syncguard.Error {
	t.Helper()
	var se *syncguard.Error
	if !errors.As(err, &se) || se.Code != code {
		t.Fatalf("want a *syncguard.Error with code %s, got %v", code, err)
	}
	return se
}

// TestRender renders every statement file: a template error panics.
func TestRender(t *testing.T) {
	ddl, err := SchemaSQL(&syncguard.Config{TableName: "App_Locks"})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`FUNCTION "App_Locks_hold"(p_lock_id text, p_key text)`, `DROP FUNCTION IF EXISTS "App_Locks_hold"(text)`, `FROM "App_Locks" AS k`, `FOR KEY SHARE OF k`, `'SG001'`,
		`FUNCTION "App_Locks_ml_hold"(p_lock_id text, p_key text)`, `FROM "App_Locks_ml" AS k`, `FOR SHARE OF k`,
		`FUNCTION "App_Locks_sem_hold"(p_lock_id text)`, `FROM "App_Locks_sem_slots" AS k`,
		`FUNCTION "App_Locks_rw_hold"(p_lock_id text)`, `FROM "App_Locks_rw" AS k`} {
		if !strings.Contains(ddl, want) {
			t.Errorf("SchemaSQL lacks %q:\n%s", want, ddl)
		}
	}
	fg, err := FenceGuardSQL("billing.Accounts", "fence")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"billing"."Accounts_fence_guard"()`, `BEFORE UPDATE ON "billing"."Accounts"`, `OLD."fence"`, `'SG002'`} {
		if !strings.Contains(fg, want) {
			t.Errorf("FenceGuardSQL lacks %q:\n%s", want, fg)
		}
	}
}

// Bad input is InvalidArgument before any I/O (the mock expects no query).
func TestBadInputBeforeIO(t *testing.T) {
	g, tx, mock := newMock(t)
	ctx := context.Background()
	cases := []struct {
		name string
		err  error
	}{
		{"empty key", func() error { _, err := g.Hold(ctx, tx, "", lockID); return err }()},
		{"bad lockId", func() error { _, err := g.Hold(ctx, tx, "k", "short"); return err }()},
		{"nil tx", func() error { _, err := g.Hold(ctx, nil, "k", lockID); return err }()},
		{"nil lease", func() error { _, err := g.HoldLease(ctx, tx, nil); return err }()},
	}
	for _, c := range cases {
		if se := wantCode(t, c.err, syncguard.ErrInvalidArgument); errors.Is(se, syncguard.ErrLockLost) {
			t.Errorf("%s: bad input must not read as a lost lease: %v", c.name, se)
		}
	}
	// A lease of a Locker HoldLease cannot check (an in-memory fake), or
	// a nil one inside a kind's lease type: refused before any I/O.
	fake, err := syncguard.Lock(ctx, syncguardtest.New(), "k", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer fake.Close()
	set, err := multilock.Lock(ctx, syncguardtest.NewMultiLock(), []string{"a", "b"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	for _, c := range []struct {
		name  string
		lease Lease
		want  string
	}{
		{"fake mutex", fake, "cannot check a lease of Locker *syncguardtest.Backend"},
		{"fake multilock", set, "cannot check a lease of Locker *syncguardtest.MultiLock"},
		{"typed nil", (*syncguard.Lease)(nil), "lease must not be nil"},
		{"nil set", (*multilock.Lease)(nil), "lease must not be nil"},
		{"empty permit", &semaphore.Permit{}, "lease must not be nil"},
	} {
		_, err := g.HoldLease(ctx, tx, c.lease)
		if se := wantCode(t, err, syncguard.ErrInvalidArgument); errors.Is(err, syncguard.ErrLockLost) || !strings.Contains(se.Msg, c.want) {
			t.Errorf("%s: HoldLease: %v, want %q", c.name, err, c.want)
		}
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, err = g.Hold(cctx, tx, "k", lockID)
	wantCode(t, err, syncguard.ErrAborted)
	for _, c := range []struct {
		cfg  *syncguard.Config
		want string
	}{
		{&syncguard.Config{TableName: "bad-name", Dialect: fakeDialect{}}, "not a plain SQL identifier"},
		{&syncguard.Config{}, "db must not be nil"},
	} {
		_, err := New(nil, c.cfg)
		if se := wantCode(t, err, syncguard.ErrInvalidArgument); !strings.Contains(se.Msg, c.want) {
			t.Errorf("New(%+v): %v, want %q", c.cfg, err, c.want)
		}
	}
	for _, tc := range [][2]string{{"a.b.c", "f"}, {"t", "bad col"}, {strings.Repeat("x", 60), "f"}} {
		_, err := FenceGuardSQL(tc[0], tc[1])
		wantCode(t, err, syncguard.ErrInvalidArgument)
	}
	if err := mock.ExpectationsWereMet(); err != nil {
		t.Error(err)
	}
}

// Hold reads the row, tells a held lease from an expired, a gone or
// another key's one, and maps 40001 and 40P01 to words.
func TestHoldOutcomes(t *testing.T) {
	cols := []string{"key", "fence", "expires_at_ms", "now_ms"}
	cases := []struct {
		name    string
		row     []any
		err     error
		code    syncguard.Code
		lost    bool
		msgPart string
	}{
		{"held", []any{"k", "000000000000007", int64(2000), int64(1000)}, nil, "", false, ""},
		{"expired", []any{"k", "000000000000007", int64(1000), int64(1500)}, nil, syncguard.ErrInvalidArgument, true, "expired 500 ms ago"},
		{"expired at the instant", []any{"k", "000000000000007", int64(1000), int64(1000)}, nil, syncguard.ErrInvalidArgument, true, "expired 0 ms ago"},
		{"gone", []any{nil, nil, nil, int64(1000)}, nil, syncguard.ErrInvalidArgument, true, "no lock has this lockId"},
		{"other key", []any{"other", "000000000000007", int64(2000), int64(1000)}, nil, syncguard.ErrInvalidArgument, true, "another key"},
		{"serialization", nil, &pgErr{"40001", "could not serialize access due to concurrent update"}, syncguard.ErrServiceUnavailable, false, "after this transaction's snapshot"},
		{"deadlock", nil, &pgErr{"40P01", "deadlock detected"}, syncguard.ErrServiceUnavailable, false, "deadlock"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g, tx, mock := newMock(t)
			q := mock.ExpectQuery(g.holds[kindMutex]).WithArgs(lockID)
			if c.err != nil {
				q.WillReturnError(c.err)
			} else {
				vals := make([]sqldriver.Value, len(c.row))
				for i, v := range c.row {
					vals[i] = v
				}
				q.WillReturnRows(sqlmock.NewRows(cols).AddRow(vals...))
			}
			h, err := g.Hold(context.Background(), tx, "k", lockID)
			if c.code == "" {
				if err != nil || h.Fence != "000000000000007" || h.ExpiresAt.UnixMilli() != 2000 || h.Now.UnixMilli() != 1000 {
					t.Fatalf("Hold = %+v, %v", h, err)
				}
				return
			}
			se := wantCode(t, err, c.code)
			if errors.Is(err, syncguard.ErrLockLost) != c.lost || !strings.Contains(se.Msg, c.msgPart) {
				t.Errorf("Hold: %v (lost %v), want lost %v and %q", err, errors.Is(err, syncguard.ErrLockLost), c.lost, c.msgPart)
			}
			if strings.Contains(err.Error(), lockID) {
				t.Errorf("the error shows the raw lockId: %v", err)
			}
		})
	}
}

// Classify reads the SQLSTATEs of the SQL function and the fence guard.
func TestClassify(t *testing.T) {
	g, _, _ := newMock(t)
	ctx := context.Background()
	if err := g.Classify(ctx, nil); err != nil {
		t.Fatal(err)
	}
	err := g.Classify(ctx, &pgErr{SQLStateLeaseLost, "syncguard: lease not held: expired 5 ms ago by the server's clock"})
	if se := wantCode(t, err, syncguard.ErrInvalidArgument); !errors.Is(err, syncguard.ErrLockLost) || !strings.Contains(se.Msg, "expired 5 ms") {
		t.Errorf("SG001: %v", err)
	}
	err = g.Classify(ctx, &pgErr{SQLStateStaleFence, "syncguard: stale fence: res.fence 4 is below the stored 5"})
	if wantCode(t, err, syncguard.ErrInvalidArgument); !errors.Is(err, ErrStaleFence) || errors.Is(err, syncguard.ErrLockLost) {
		t.Errorf("SG002: %v", err)
	}
	wantCode(t, g.Classify(ctx, &pgErr{"57014", "canceling statement"}), syncguard.ErrNetworkTimeout)
}
