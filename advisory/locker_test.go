package advisory

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/DATA-DOG/go-sqlmock"

	"github.com/syncguard/syncguard-go/driver"
	"github.com/syncguard/syncguard-go/syncguard"
)

// pgErr stands in for a driver error carrying a SQLSTATE.
type pgErr struct{ state string }

func (e *pgErr) Error() string { return "pg error " + e.state }

type fakeDialect struct{}

func (fakeDialect) Name() string { return "fake" }
func (fakeDialect) Inspect(err error) driver.ErrorInfo {
	var pe *pgErr
	if errors.As(err, &pe) {
		return driver.ErrorInfo{SQLState: pe.state}
	}
	return driver.ErrorInfo{}
}

func newMock(t *testing.T, cfg *Config) (*Client, *sql.DB, sqlmock.Sqlmock) {
	t.Helper()
	db, mock, err := sqlmock.New(sqlmock.QueryMatcherOption(sqlmock.QueryMatcherEqual))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	c := Config{}
	if cfg != nil {
		c = *cfg
	}
	c.Dialect = fakeDialect{}
	l, err := New(db, &c)
	if err != nil {
		t.Fatal(err)
	}
	return l, db, mock
}

// backendStart is the backend_start the mocked try reports.
var backendStart = time.Date(2025, 1, 2, 3, 4, 5, 123456000, time.UTC)

func wantCode(t *testing.T, err error, code syncguard.Code) *syncguard.Error {
	t.Helper()
	var se *syncguard.Error
	if !errors.As(err, &se) || se.Code != code {
		t.Fatalf("want a *syncguard.Error with code %s, got %v", code, err)
	}
	return se
}

func TestNewRejects(t *testing.T) {
	db, _, _ := sqlmock.New()
	defer db.Close()
	for name, c := range map[string]struct {
		db  *sql.DB
		cfg *Config
	}{
		"nil db":                {nil, nil},
		"declared only, no reg": {db, &Config{Dialect: fakeDialect{}, DeclaredOnly: true}},
		"negative grace":        {db, &Config{Dialect: fakeDialect{}, CancelGrace: -1}},
		"unregistered driver":   {db, nil},
	} {
		_, err := New(c.db, c.cfg)
		if syncguard.CodeOf(err) != syncguard.ErrInvalidArgument {
			t.Errorf("%s: want InvalidArgument, got %v", name, err)
		}
	}
}

func TestInvalidArgumentBeforeIO(t *testing.T) {
	reg := MustNewRegistry("ns")
	txLock := reg.MustDeclare(Decl{Name: "tx", Kind: Transaction, Purpose: "p"}).MustKey()
	sessLock := reg.MustDeclare(Decl{Name: "sess", Kind: Session, Purpose: "p"}).MustKey()
	foreign := MustNewRegistry("other").MustDeclare(Decl{Name: "tx", Kind: Transaction, Purpose: "p"}).MustKey()

	l, db, mock := newMock(t, &Config{Registry: reg})
	strict, _, _ := newMock(t, &Config{Registry: reg, DeclaredOnly: true})
	ctx := context.Background()
	mock.ExpectBegin()
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	mock.ExpectRollback()
	defer tx.Rollback()

	calls := map[string]func() error{
		"LockTx nil tx":          func() error { return l.LockTx(ctx, nil, ID(1)) },
		"LockTx zero key":        func() error { return l.LockTx(ctx, tx, Key{}) },
		"LockTx session lock":    func() error { return l.LockTx(ctx, tx, sessLock) },
		"TryLockTx session lock": func() error { _, err := l.TryLockTx(ctx, tx, sessLock); return err },
		"LockConn nil conn":      func() error { _, err := l.LockConn(ctx, nil, ID(1)); return err },
		"LockSession tx lock":    func() error { _, err := l.LockSession(ctx, txLock); return err },
		"TryLockSession zero":    func() error { _, _, err := l.TryLockSession(ctx, Key{}); return err },
		"UnlockConn nil conn":    func() error { return l.UnlockConn(ctx, nil, ID(1)) },
		"strict raw id":          func() error { return strict.LockTx(ctx, tx, ID(1)) },
		"strict foreign":         func() error { return strict.LockTx(ctx, tx, foreign) },
		"strict legacy":          func() error { _, err := strict.TryLockTx(ctx, tx, FromLegacyFNV1a32("x")); return err },
	}
	for name, call := range calls {
		err := call()
		if syncguard.CodeOf(err) != syncguard.ErrInvalidArgument || !errors.Is(err, syncguard.ErrInvalidArgument) {
			t.Errorf("%s: want InvalidArgument, got %v", name, err)
		}
	}
	// No statement expectation was set: any I/O would have failed with
	// something other than InvalidArgument.
}

func TestDoneContextBeforeIO(t *testing.T) {
	l, db, mock := newMock(t, nil)
	mock.ExpectBegin()
	tx, _ := db.Begin()
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel2()
	for _, c := range []struct {
		ctx  context.Context
		code syncguard.Code
	}{{cancelled, syncguard.ErrAborted}, {expired, syncguard.ErrNetworkTimeout}} {
		wantCode(t, l.LockTx(c.ctx, tx, ID(1)), c.code)
		_, err := l.TryLockTx(c.ctx, tx, ID(1))
		wantCode(t, err, c.code)
		_, err = l.LockSession(c.ctx, ID(1))
		wantCode(t, err, c.code)
		_, err = l.Locks(c.ctx)
		wantCode(t, err, c.code)
	}
	if err := mock.ExpectationsWereMet(); err != nil {
		t.Fatal(err)
	}
}

func TestLockTxFastPathAndForms(t *testing.T) {
	l, db, mock := newMock(t, nil)
	mock.ExpectBegin()
	tx, _ := db.Begin()
	mock.ExpectQuery(queries[formInt64].tryXactPID).WithArgs(int64(42424242)).
		WillReturnRows(sqlmock.NewRows([]string{"pid", "start", "got"}).AddRow(int64(77), backendStart, true))
	if err := l.LockTx(context.Background(), tx, ID(42424242)); err != nil {
		t.Fatal(err)
	}
	mock.ExpectQuery(queries[formPair].tryXact).WithArgs(int64(-1), int64(2)).
		WillReturnRows(sqlmock.NewRows([]string{"got"}).AddRow(false))
	got, err := l.TryLockTx(context.Background(), tx, Pair(-1, 2))
	if err != nil || got {
		t.Fatalf("TryLockTx = %v, %v; want false (held elsewhere), nil", got, err)
	}
	if err := mock.ExpectationsWereMet(); err != nil {
		t.Fatal(err)
	}
	if queries[formPair].xact != "SELECT pg_advisory_xact_lock($1::int4, $2::int4)" ||
		queries[formInt64].unlock != "SELECT pg_advisory_unlock($1::bigint)" ||
		queries[formInt64].tryXactPID != "SELECT pg_backend_pid(), (SELECT backend_start FROM pg_stat_activity WHERE pid = pg_backend_pid()), "+
			"pg_try_advisory_xact_lock($1::bigint)" ||
		queries[formPair].trySessionPID != "SELECT pg_backend_pid(), (SELECT backend_start FROM pg_stat_activity WHERE pid = pg_backend_pid()), "+
			"pg_try_advisory_lock($1::int4, $2::int4)" {
		t.Fatalf("unexpected SQL: %+v", queries)
	}
	// The cancel reaches only that session (pid and backend_start), and only
	// while it waits for an advisory lock.
	if sqlCancel != "SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE pid = $1 AND backend_start = $2 "+
		"AND wait_event_type = 'Lock' AND wait_event = 'advisory'" {
		t.Fatalf("unexpected cancel SQL: %s", sqlCancel)
	}
}

func TestLockTxWaitErrors(t *testing.T) {
	for _, c := range []struct {
		state string
		code  syncguard.Code
	}{
		{"40P01", syncguard.ErrServiceUnavailable}, // deadlock: retry the transaction
		{"55P03", syncguard.ErrAcquisitionTimeout}, // lock_timeout
		{"57014", syncguard.ErrNetworkTimeout},     // statement_timeout
		{"25P02", syncguard.ErrInternal},           // the transaction was already aborted
	} {
		l, db, mock := newMock(t, nil)
		mock.ExpectBegin()
		tx, _ := db.Begin()
		mock.ExpectQuery(queries[formInt64].tryXactPID).WithArgs(int64(5)).
			WillReturnRows(sqlmock.NewRows([]string{"pid", "start", "got"}).AddRow(int64(77), backendStart, false))
		mock.ExpectExec(queries[formInt64].xact).WithArgs(int64(5)).WillReturnError(&pgErr{c.state})
		err := l.LockTx(context.Background(), tx, ID(5))
		se := wantCode(t, err, c.code)
		if se.SQLState != c.state || se.Key != "5" || se.Op != "advisory.lockTx" {
			t.Errorf("%s: error fields %+v", c.state, se)
		}
	}
}

// When the server-side cancel cannot be sent, the driver's own context is
// cancelled at once: LockTx still returns promptly with Aborted.
func TestLockTxCancelFallsBackToDriver(t *testing.T) {
	// Fake time (testing/synctest): the durations below do not depend on
	// the machine's load.
	synctest.Test(t, func(t *testing.T) {
		l, db, mock := newMock(t, &Config{CancelGrace: time.Minute})
		defer l.db.Close() // the pool's goroutines must end inside the bubble
		expectWaitingLockTx(mock)
		tx, _ := db.Begin()
		defer tx.Rollback() //nolint:errcheck // ends the transaction's goroutine
		// The role is not allowed to signal the waiting backend.
		mock.ExpectQuery(sqlCancel).WithArgs(int64(77), backendStart).WillReturnError(&pgErr{"42501"})
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(50*time.Millisecond, cancel)
		start := time.Now()
		err := l.LockTx(ctx, tx, ID(5))
		wantCode(t, err, syncguard.ErrAborted)
		if d := time.Since(start); d > 500*time.Millisecond {
			t.Fatalf("LockTx returned %v after the cancel", d)
		}
		if !errors.Is(err, context.Canceled) {
			t.Errorf("the cause should be context.Canceled: %v", err)
		}
	})
}

// The server-side cancel carries the pid and backend_start read by the try;
// if the statement still does not return, the driver is cancelled after
// CancelGrace.
func TestLockTxCancelServerSideThenGrace(t *testing.T) {
	// Fake time (testing/synctest): the durations below do not depend on
	// the machine's load.
	synctest.Test(t, func(t *testing.T) {
		l, db, mock := newMock(t, &Config{CancelGrace: 100 * time.Millisecond})
		defer l.db.Close() // the pool's goroutines must end inside the bubble
		expectWaitingLockTx(mock)
		tx, _ := db.Begin()
		defer tx.Rollback() //nolint:errcheck // ends the transaction's goroutine
		mock.ExpectQuery(sqlCancel).WithArgs(int64(77), backendStart).WillReturnRows(sqlmock.NewRows([]string{"ok"}).AddRow(true))
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		start := time.Now()
		err := l.LockTx(ctx, tx, ID(5))
		// The mock ignores the cancel, so the driver was cancelled: no server
		// confirmation, so a deadline is NetworkTimeout.
		wantCode(t, err, syncguard.ErrNetworkTimeout)
		if d := time.Since(start); d < 140*time.Millisecond || d > time.Second {
			t.Fatalf("LockTx returned after %v; want about deadline + CancelGrace", d)
		}
		if err := mock.ExpectationsWereMet(); err != nil {
			t.Fatal(err)
		}
	})
}

// mockWait sets up a contended LockTx of ID(5): the try reports pid 77 and
// start, and the wait takes delay, then succeeds.
func mockWait(t *testing.T, cfg *Config, start any, delay time.Duration) (*Client, *sql.Tx, sqlmock.Sqlmock) {
	t.Helper()
	l, db, mock := newMock(t, cfg)
	mock.MatchExpectationsInOrder(false)
	mock.ExpectBegin()
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	mock.ExpectQuery(queries[formInt64].tryXactPID).WithArgs(int64(5)).
		WillReturnRows(sqlmock.NewRows([]string{"pid", "start", "got"}).AddRow(int64(77), start, false))
	mock.ExpectExec(queries[formInt64].xact).WithArgs(int64(5)).WillDelayFor(delay).WillReturnResult(sqlmock.NewResult(0, 0))
	return l, tx, mock
}

// noWaiter is the answer of the cancel when the session is not waiting for
// an advisory lock: no row.
func noWaiter() *sqlmock.Rows { return sqlmock.NewRows([]string{"ok"}) }

// Without a backend_start (pg_stat_activity did not show it) no server-side
// cancel is sent: the driver is cancelled at once.
func TestLockTxNoBackendStartFallsBackToDriver(t *testing.T) {
	// Fake time (testing/synctest): the durations below do not depend on
	// the machine's load.
	synctest.Test(t, func(t *testing.T) {
		l, tx, mock := mockWait(t, &Config{CancelGrace: time.Minute}, nil, time.Minute)
		defer l.db.Close()  // the pool's goroutines must end inside the bubble
		defer tx.Rollback() //nolint:errcheck // ends the transaction's goroutine
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(50*time.Millisecond, cancel)
		start := time.Now()
		wantCode(t, l.LockTx(ctx, tx, ID(5)), syncguard.ErrAborted)
		if d := time.Since(start); d > 500*time.Millisecond {
			t.Fatalf("LockTx returned %v after the cancel", d)
		}
		if err := mock.ExpectationsWereMet(); err != nil {
			t.Fatal(err) // and no cancel statement was sent
		}
	})
}

// A cancel that finds the session not (yet) waiting for an advisory lock,
// say because the wait statement is still on its way, is repeated until it
// finds the wait.
func TestLockTxCancelRetriesUntilWaiting(t *testing.T) {
	// Fake time (testing/synctest): the durations below do not depend on
	// the machine's load.
	synctest.Test(t, func(t *testing.T) {
		l, tx, mock := mockWait(t, &Config{CancelGrace: 100 * time.Millisecond}, backendStart, time.Minute)
		defer l.db.Close()  // the pool's goroutines must end inside the bubble
		defer tx.Rollback() //nolint:errcheck // ends the transaction's goroutine
		mock.ExpectQuery(sqlCancel).WithArgs(int64(77), backendStart).WillReturnRows(noWaiter())
		mock.ExpectQuery(sqlCancel).WithArgs(int64(77), backendStart).WillReturnRows(noWaiter())
		mock.ExpectQuery(sqlCancel).WithArgs(int64(77), backendStart).WillReturnRows(sqlmock.NewRows([]string{"ok"}).AddRow(true))
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(50*time.Millisecond, cancel)
		start := time.Now()
		wantCode(t, l.LockTx(ctx, tx, ID(5)), syncguard.ErrAborted)
		// Two retries, then CancelGrace, since the mock ignores the cancel.
		if d := time.Since(start); d < 50*time.Millisecond+2*cancelRetry+100*time.Millisecond || d > time.Second {
			t.Fatalf("LockTx returned after %v; want about cancel + 2 retries + CancelGrace", d)
		}
		if err := mock.ExpectationsWereMet(); err != nil {
			t.Fatal(err)
		}
	})
}

// A lock granted while the cancel finds no wait is held: LockTx returns nil
// and the driver is never cancelled.
func TestLockTxGrantedDuringCancel(t *testing.T) {
	// Fake time (testing/synctest): the durations below do not depend on
	// the machine's load.
	synctest.Test(t, func(t *testing.T) {
		l, tx, mock := mockWait(t, &Config{CancelGrace: time.Minute}, backendStart, 150*time.Millisecond)
		defer l.db.Close()  // the pool's goroutines must end inside the bubble
		defer tx.Rollback() //nolint:errcheck // ends the transaction's goroutine
		for range 30 {
			mock.ExpectQuery(sqlCancel).WithArgs(int64(77), backendStart).WillReturnRows(noWaiter())
		}
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(50*time.Millisecond, cancel)
		if err := l.LockTx(ctx, tx, ID(5)); err != nil {
			t.Fatalf("a lock granted as the context ends is held; LockTx = %v", err)
		}
	})
}

// A session that never shows an advisory-lock wait (it is not waiting, or
// the role cannot see it) gets the driver's cancel after cancelTimeout, not
// after CancelGrace.
func TestLockTxCancelFindsNoWaitFallsBackToDriver(t *testing.T) {
	// Fake time (testing/synctest): the durations below do not depend on
	// the machine's load.
	synctest.Test(t, func(t *testing.T) {
		l, tx, mock := mockWait(t, &Config{CancelGrace: time.Minute}, backendStart, time.Minute)
		defer l.db.Close()  // the pool's goroutines must end inside the bubble
		defer tx.Rollback() //nolint:errcheck // ends the transaction's goroutine
		for range 100 {
			mock.ExpectQuery(sqlCancel).WithArgs(int64(77), backendStart).WillReturnRows(noWaiter())
		}
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(50*time.Millisecond, cancel)
		start := time.Now()
		wantCode(t, l.LockTx(ctx, tx, ID(5)), syncguard.ErrAborted)
		if d := time.Since(start); d < 50*time.Millisecond+cancelTimeout || d > time.Second {
			t.Fatalf("LockTx returned after %v; want about cancel + cancelTimeout", d)
		}
	})
}

// LockConn's wait is cancelled the same way, with the pid and backend_start
// of its session; a wait ended by the server (57014) leaves the connection
// usable once it is found to hold nothing.
func TestLockConnCancelServerSide(t *testing.T) {
	// Fake time (testing/synctest): the cancel comes 50 ms into the wait
	// however busy the machine (in real time it could come before the
	// first statement).
	synctest.Test(t, testLockConnCancelServerSide)
}

func testLockConnCancelServerSide(t *testing.T) {
	l, db, mock := newMock(t, nil)
	defer db.Close() // the pool's goroutines must end inside the bubble
	mock.MatchExpectationsInOrder(false)
	conn, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	mock.ExpectQuery(queries[formPair].trySessionPID).WithArgs(int64(1), int64(2)).
		WillReturnRows(sqlmock.NewRows([]string{"pid", "start", "got"}).AddRow(int64(78), backendStart, false))
	mock.ExpectExec(queries[formPair].session).WithArgs(int64(1), int64(2)).
		WillDelayFor(150 * time.Millisecond).WillReturnError(&pgErr{"57014"})
	mock.ExpectQuery(sqlCancel).WithArgs(int64(78), backendStart).WillReturnRows(sqlmock.NewRows([]string{"ok"}).AddRow(true))
	classid, objid, sub := Pair(1, 2).lockTag()
	mock.ExpectQuery(sqlHeld).WithArgs(classid, objid, sub).WillReturnRows(sqlmock.NewRows([]string{"n"}).AddRow(int64(0)))
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	_, err = l.LockConn(ctx, conn, Pair(1, 2))
	wantCode(t, err, syncguard.ErrAborted)
	if err := mock.ExpectationsWereMet(); err != nil {
		t.Fatal(err)
	}
	if err := conn.PingContext(context.Background()); err != nil {
		t.Fatalf("the connection stays usable: %v", err)
	}
	conn.Close()
}

// A deadline that the server confirms (57014 while waiting) is
// AcquisitionTimeout; a plain cancel is Aborted.
func TestWaitErrClassification(t *testing.T) {
	l, _, _ := newMock(t, nil)
	expired, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	wantCode(t, l.waitErr(expired, "op", ID(1), &pgErr{"57014"}), syncguard.ErrAcquisitionTimeout)
	cancelled, cancel2 := context.WithCancel(context.Background())
	cancel2()
	se := wantCode(t, l.waitErr(cancelled, "op", ID(1), &pgErr{"57014"}), syncguard.ErrAborted)
	if se.SQLState != "57014" {
		t.Errorf("SQLSTATE kept for diagnosis: %+v", se)
	}
	wantCode(t, l.waitErr(context.Background(), "op", ID(1), &pgErr{"57014"}), syncguard.ErrNetworkTimeout)
}

func TestSessionUnlockNotHeld(t *testing.T) {
	l, db, mock := newMock(t, nil)
	conn, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	mock.ExpectQuery(queries[formInt64].trySessionPID).WithArgs(int64(9)).WillReturnRows(sqlmock.NewRows([]string{"pid", "start", "g"}).AddRow(int64(77), backendStart, true))
	lock, ok, err := l.TryLockConn(context.Background(), conn, ID(9))
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	mock.ExpectQuery(queries[formInt64].unlock).WithArgs(int64(9)).WillReturnRows(sqlmock.NewRows([]string{"u"}).AddRow(false))
	err = lock.Close()
	se := wantCode(t, err, syncguard.ErrInternal)
	if !errors.Is(err, ErrNotHeld) || !errors.Is(err, syncguard.ErrInternal) || se.Op != "advisory.unlock" {
		t.Fatalf("want ErrNotHeld, got %v", err)
	}
	if err := lock.Close(); err != nil {
		t.Fatalf("a second Close is a no-op, got %v", err)
	}
	if held, err := lock.Held(context.Background()); held || err != nil {
		t.Fatalf("Held after Close = %v, %v", held, err)
	}
	if err := conn.PingContext(context.Background()); err != nil {
		t.Fatalf("the connection is fine after a not-held unlock: %v", err)
	}
	mock.ExpectQuery(queries[formInt64].unlock).WithArgs(int64(9)).WillReturnRows(sqlmock.NewRows([]string{"u"}).AddRow(false))
	if err := l.UnlockConn(context.Background(), conn, ID(9)); !errors.Is(err, ErrNotHeld) || syncguard.CodeOf(err) != syncguard.ErrInternal {
		t.Fatalf("UnlockConn of a lock not held = %v; want ErrNotHeld (Internal), as SessionLock.Unlock", err)
	}
	if err := mock.ExpectationsWereMet(); err != nil {
		t.Fatal(err)
	}
}

func TestSessionUnlockFailureDiscardsConn(t *testing.T) {
	l, db, mock := newMock(t, nil)
	conn, _ := db.Conn(context.Background())
	mock.ExpectQuery(queries[formInt64].trySessionPID).WithArgs(int64(9)).WillReturnRows(sqlmock.NewRows([]string{"pid", "start", "g"}).AddRow(int64(77), backendStart, true))
	lock, _, err := l.TryLockConn(context.Background(), conn, ID(9))
	if err != nil {
		t.Fatal(err)
	}
	mock.ExpectQuery(queries[formInt64].unlock).WithArgs(int64(9)).WillReturnError(&pgErr{"08006"})
	err = lock.Unlock(context.Background())
	se := wantCode(t, err, syncguard.ErrServiceUnavailable)
	if se.Msg == "" || !errors.Is(err, syncguard.ErrServiceUnavailable) {
		t.Fatalf("error %v", err)
	}
	if err := conn.PingContext(context.Background()); !errors.Is(err, sql.ErrConnDone) {
		t.Fatalf("a connection whose unlock failed must be discarded; Ping = %v", err)
	}
}

// Unlock runs even when its context is already done: skipping it would
// leave the lock held.
func TestSessionUnlockWithDoneContextStillUnlocks(t *testing.T) {
	l, db, mock := newMock(t, nil)
	conn, _ := db.Conn(context.Background())
	mock.ExpectQuery(queries[formInt64].trySessionPID).WithArgs(int64(9)).WillReturnRows(sqlmock.NewRows([]string{"pid", "start", "g"}).AddRow(int64(77), backendStart, true))
	lock, _, _ := l.TryLockConn(context.Background(), conn, ID(9))
	mock.ExpectQuery(queries[formInt64].unlock).WithArgs(int64(9)).WillReturnRows(sqlmock.NewRows([]string{"u"}).AddRow(true))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := lock.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := mock.ExpectationsWereMet(); err != nil {
		t.Fatal(err)
	}
}

func TestLocksDecodesRows(t *testing.T) {
	reg := MustNewRegistry("ns")
	reg.MustDeclare(Decl{Name: "cleanup", Kind: Session, Purpose: "p", ID: ID(42424242)})
	l, _, mock := newMock(t, &Config{Registry: reg})
	cols := []string{"classid", "objid", "objsubid", "pid", "mode", "granted", "blocking", "waitstart", "app", "state", "xact", "query"}
	mock.ExpectQuery(sqlLocks).WithArgs(false).WillReturnRows(sqlmock.NewRows(cols).
		AddRow(int64(0), int64(42424242), int32(1), int64(10), "ExclusiveLock", true, "", nil, "svc", "idle", nil, int64(1700000000000)).
		AddRow(int64(0), int64(42424242), int32(1), int64(11), "ExclusiveLock", false, "10,12", int64(1700000000500), "svc", "active", int64(1700000000400), int64(1700000000450)).
		AddRow(int64(4294967295), int64(2), int32(2), nil, "ShareLock", true, "", nil, nil, nil, nil, nil).
		AddRow(int64(1), int64(2), int32(3), int64(12), "ExclusiveLock", true, "", nil, nil, nil, nil, nil))
	got, err := l.Locks(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 {
		t.Fatalf("want 3 rows (objsubid 3 is not a function lock), got %+v", got)
	}
	h, w, p := got[0], got[1], got[2]
	if !h.Granted || h.PID != 10 || h.Name != "cleanup" || h.Key.Name() != "cleanup" || !h.Key.Same(ID(42424242)) || h.BlockedBy != nil || !h.WaitStart.IsZero() {
		t.Errorf("holder row: %+v", h)
	}
	if w.Granted || w.PID != 11 || len(w.BlockedBy) != 2 || w.BlockedBy[0] != 10 || w.BlockedBy[1] != 12 ||
		w.WaitStart.UnixMilli() != 1700000000500 || w.State != "active" || w.ApplicationName != "svc" {
		t.Errorf("waiter row: %+v", w)
	}
	if !p.Key.Same(Pair(-1, 2)) || p.PID != 0 || p.Mode != "ShareLock" || p.Name != "" {
		t.Errorf("pair row (prepared transaction): %+v", p)
	}
	mock.ExpectQuery(sqlLocks).WithArgs(true).WillReturnError(&pgErr{"42501"})
	_, err = l.Waiting(context.Background())
	wantCode(t, err, syncguard.ErrAuthFailed)
}

// expectWaitingLockTx sets mock up, in any order, for a transaction whose
// LockTx of ID(5) waits: the try finds the lock taken (backend pid 77),
// and the waiting statement blocks for a minute.
func expectWaitingLockTx(mock sqlmock.Sqlmock) {
	mock.MatchExpectationsInOrder(false)
	mock.ExpectBegin()
	mock.ExpectQuery(queries[formInt64].tryXactPID).WithArgs(int64(5)).
		WillReturnRows(sqlmock.NewRows([]string{"pid", "start", "got"}).AddRow(int64(77), backendStart, false))
	mock.ExpectExec(queries[formInt64].xact).WithArgs(int64(5)).WillDelayFor(time.Minute).WillReturnResult(sqlmock.NewResult(0, 0))
}
