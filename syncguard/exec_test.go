package syncguard

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/DATA-DOG/go-sqlmock"

	"github.com/syncguard/syncguard-go/internal/rules"
)

// A prepared statement that a pooler lost (26000 at the first execution,
// 42P05 at a prepare) is run again unprepared, and the Backend stays
// unprepared, with one warning that says why.
func TestLostPreparedStatementSwitchesToOneShot(t *testing.T) {
	for _, st := range []string{"26000", "42P05"} {
		db, mock := newMockDB(t)
		var logs bytes.Buffer
		b, err := New(db, &Config{Dialect: fakeDialect{}, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		if err != nil {
			t.Fatal(err)
		}
		id := rules.GenerateLockID()
		row := func() *sqlmock.Rows {
			return sqlmock.NewRows([]string{"d", "s", "n", "k", "c", "l"}).AddRow(id, nil, int64(1), "0123456789abcdef", "ch", false)
		}
		if st == "42P05" {
			mock.ExpectPrepare(`FROM "syncguard_locks_op_`).WillReturnError(&pgErr{code: st})
		} else {
			mock.ExpectPrepare(`FROM "syncguard_locks_op_`).ExpectQuery().WillReturnError(&pgErr{code: st})
		}
		// one-shot, through the statement's function, and from now on
		mock.ExpectQuery(`FROM "syncguard_locks_op_`).WithArgs(id, sqlmock.AnyArg(), sqlmock.AnyArg(), sqlmock.AnyArg()).WillReturnRows(row())
		mock.ExpectQuery(`FROM "syncguard_locks_op_`).WithArgs(id, sqlmock.AnyArg(), sqlmock.AnyArg(), sqlmock.AnyArg()).WillReturnRows(row())
		for range 2 {
			if r, err := b.Release(context.Background(), id); err != nil || !r.OK {
				t.Fatalf("%s: release after a lost prepared statement: %+v, %v", st, r, err)
			}
		}
		if err := mock.ExpectationsWereMet(); err != nil {
			t.Fatalf("%s: %v", st, err)
		}
		if n := strings.Count(logs.String(), "prepared statements switched off"); n != 1 || !strings.Contains(logs.String(), "level=WARN") {
			t.Errorf("%s: want one warning with the reason; got %q", st, logs.String())
		}
	}
}

// Inside a transaction the lost statement aborted the caller's transaction:
// the error is returned (the caller retries the transaction), and the
// Backend is unprepared from then on.
func TestLostPreparedStatementInTx(t *testing.T) {
	db, mock, _ := sqlmock.New()
	defer db.Close()
	b, _ := New(db, &Config{Dialect: fakeDialect{}, Logger: discardLogger()})
	b.shared.prep.Store(prepOn)
	id := rules.GenerateLockID()
	ep := mock.ExpectPrepare(`FROM "syncguard_locks_op_`)
	mock.ExpectBegin()
	ep.ExpectQuery().WillReturnError(&pgErr{code: "26000"})
	if _, err := b.shared.prepared(context.Background(), stmtRelease); err != nil {
		t.Fatal(err)
	}
	tx, _ := db.Begin()
	_, err := b.WithTx(tx).Release(context.Background(), id)
	if CodeOf(err) != ErrInternal || !strings.Contains(err.Error(), "26000") {
		t.Fatalf("the lost statement's error must reach the caller inside a transaction; got %v", err)
	}
	if b.shared.prep.Load() != prepOff {
		t.Fatal("the Backend must be unprepared after a lost statement")
	}
}

// Once prepared statements are off nothing is prepared any more, even by a
// caller that looked before another goroutine's probe switched them off
// (and so reaches prepared with the mode already off): the statement would
// stay on its connection, where the driver may keep using it.
func TestNothingPreparedAfterSwitchOff(t *testing.T) {
	db, mock, err := sqlmock.New() // no ExpectPrepare: a prepare fails the test
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	b, _ := New(db, &Config{Dialect: fakeDialect{}, Logger: discardLogger()})
	b.shared.switchOff(slog.LevelInfo, "test")
	for i := range numStmts {
		if st, err := b.shared.prepared(context.Background(), i); st != nil || err != nil {
			t.Fatalf("statement %d: prepared after the switch: %v, %v", i, st, err)
		}
	}
	if err := mock.ExpectationsWereMet(); err != nil {
		t.Fatal(err)
	}
}

// TestStatementFunctionCalls: sent unprepared, a release calls its
// statement function; when the function is missing (42883) the Backend
// sends the statement itself, now and from then on, warning once.
func TestStatementFunctionCalls(t *testing.T) {
	db, mock := newMockDB(t)
	var logs bytes.Buffer
	b, err := New(db, &Config{Dialect: fakeDialect{}, DisablePrepare: true, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	id := rules.GenerateLockID()
	row := func() *sqlmock.Rows {
		return sqlmock.NewRows([]string{"d", "s", "n", "k", "c", "l"}).AddRow(id, nil, int64(1), nil, nil, false)
	}
	fn := `SELECT * FROM "syncguard_locks_op_`
	mock.ExpectQuery(fn).WithArgs(id, true, true, nil).WillReturnRows(row())
	mock.ExpectQuery(fn).WillReturnError(&pgErr{code: "42883", msg: `function syncguard_locks_op_0123abcd(text, boolean, boolean, text) does not exist`})
	mock.ExpectQuery("DELETE FROM").WithArgs(id, true, true, nil).WillReturnRows(row()) // the same release, sent itself
	mock.ExpectQuery("DELETE FROM").WillReturnRows(row())                               // and from then on
	for range 3 {
		if r, err := b.Release(context.Background(), id); err != nil || !r.OK {
			t.Fatalf("release: %+v, %v", r, err)
		}
	}
	if err := mock.ExpectationsWereMet(); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(logs.String(), "statement functions of this version are missing"); n != 1 {
		t.Errorf("want one warning; got %q", logs.String())
	}
}

// TestPreparedStatementFunctionCalls: with prepared statements a Backend
// prepares the calls of the statement functions (their statements are
// then planned once per session, generically); a function missing at the
// prepare, or dropped after it, makes it prepare the statement itself,
// for good, with one warning.
func TestPreparedStatementFunctionCalls(t *testing.T) {
	missing := &pgErr{code: "42883", msg: `function syncguard_locks_op_0123abcd(text, boolean, boolean, text) does not exist`}
	for _, when := range []string{"at the prepare", "after the prepare"} {
		db, mock := newMockDB(t)
		var logs bytes.Buffer
		b, err := New(db, &Config{Dialect: fakeDialect{}, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		if err != nil {
			t.Fatal(err)
		}
		b.shared.prep.Store(prepOn)
		id := rules.GenerateLockID()
		row := func() *sqlmock.Rows {
			return sqlmock.NewRows([]string{"d", "s", "n", "k", "c", "l"}).AddRow(id, nil, int64(1), nil, nil, false)
		}
		fn := `SELECT * FROM "syncguard_locks_op_`
		if when == "at the prepare" {
			mock.ExpectPrepare(fn).WillReturnError(missing)
		} else {
			ep := mock.ExpectPrepare(fn)
			ep.ExpectQuery().WithArgs(id, true, true, nil).WillReturnRows(row())
			ep.ExpectQuery().WillReturnError(missing)
			ep.WillBeClosed()
		}
		plain := mock.ExpectPrepare("DELETE FROM")
		plain.ExpectQuery().WithArgs(id, true, true, nil).WillReturnRows(row()) // the same release, its statement prepared
		plain.ExpectQuery().WillReturnRows(row())                               // and from then on
		rounds := 2
		if when == "after the prepare" {
			rounds = 3
		}
		for range rounds {
			if r, err := b.Release(context.Background(), id); err != nil || !r.OK {
				t.Fatalf("%s: release: %+v, %v", when, r, err)
			}
		}
		if err := mock.ExpectationsWereMet(); err != nil {
			t.Fatalf("%s: %v", when, err)
		}
		if n := strings.Count(logs.String(), "statement functions of this version are missing"); n != 1 {
			t.Errorf("%s: want one warning; got %q", when, logs.String())
		}
	}
}

// TestQueuedWaiterWritesAPlaceholderOnlyAtItsSecondAbsent: a queued
// attempt that finds the key free without a row and its advisory lock
// held answers locked without the placeholder statement (its look at
// pg_locks stalls the server's lock manager, and the holder is almost
// always a racing acquire); the waiter's next attempt that finds the same
// writes it.
func TestQueuedWaiterWritesAPlaceholderOnlyAtItsSecondAbsent(t *testing.T) {
	b, mock := newMock(t, nil)
	absent := func() *sqlmock.Rows {
		return sqlmock.NewRows([]string{"a", "b", "c", "d", "e", "f", "g", "o", "h"}).AddRow(nil, nil, nil, nil, false, int64(1000), true, false, int64(0))
	}
	mock.ExpectQuery("a AS MATERIALIZED").WillReturnRows(absent())
	mock.ExpectQuery("a AS MATERIALIZED").WillReturnRows(absent())
	mock.ExpectQuery("WITH p AS").WillReturnRows(sqlmock.NewRows([]string{"p"}).AddRow(false))
	w := b.Queue("k", "", false)
	for i := range 2 {
		r, err := w.Attempt(context.Background(), time.Second)
		if err != nil || r.OK {
			t.Fatalf("attempt %d: %+v, %v; want locked", i, r, err)
		}
		if i == 0 && r.RetryIn != absentRetry {
			t.Errorf("the skipped absent asks for an attempt again in %v (the key is free), got %v", absentRetry, r.RetryIn)
		}
	}
	if err := mock.ExpectationsWereMet(); err != nil {
		t.Fatal(err)
	}
}

// TestStatementFunctionsInACallersTransaction: in a caller's transaction a
// Backend sends the statement itself until a function has served on the
// pool (a missing one would abort that transaction), then calls it.
func TestStatementFunctionsInACallersTransaction(t *testing.T) {
	b, mock := newMock(t, nil)
	b.shared.noFuncs.Store(false) // newMock turns them off
	id := rules.GenerateLockID()
	row := func() *sqlmock.Rows {
		return sqlmock.NewRows([]string{"d", "s", "n", "k", "c", "l"}).AddRow(id, nil, int64(1), nil, nil, false)
	}
	mock.ExpectBegin()
	mock.ExpectQuery("DELETE FROM").WillReturnRows(row())
	mock.ExpectQuery(`FROM "syncguard_locks_op_`).WillReturnRows(row()) // on the pool
	mock.ExpectQuery(`FROM "syncguard_locks_op_`).WillReturnRows(row()) // in the transaction, from then on
	mock.ExpectCommit()
	tx, err := b.shared.db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	for i, bb := range []*Backend{b.WithTx(tx), b, b.WithTx(tx)} {
		if r, err := bb.Release(context.Background(), id); err != nil || !r.OK {
			t.Fatalf("release %d: %+v, %v", i, r, err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := mock.ExpectationsWereMet(); err != nil {
		t.Fatal(err)
	}
}
