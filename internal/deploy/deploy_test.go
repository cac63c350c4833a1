package deploy

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/DATA-DOG/go-sqlmock"

	"github.com/syncguard/syncguard-go/driver"
	"github.com/syncguard/syncguard-go/internal/pooler"
)

// sqlErr is a server error with a SQLSTATE, as fakeDialect reads it.
type sqlErr struct{ code, msg string }

func (e *sqlErr) Error() string { return e.msg }

// fakeDialect reads sqlErr, announces backend pid announced on every
// connection and sends one-shot statements with oneShot first.
type fakeDialect struct {
	announced int
	oneShot   []any
}

func (fakeDialect) Name() string { return "fake" }

func (d fakeDialect) Inspect(err error) driver.ErrorInfo {
	var e *sqlErr
	if errors.As(err, &e) {
		return driver.ErrorInfo{SQLState: e.code, Severity: "ERROR", Message: e.msg}
	}
	return driver.ErrorInfo{}
}

func (d fakeDialect) BackendPID(any) (int, bool) { return d.announced, d.announced != 0 }

func (d fakeDialect) OneShotArgs() []any { return d.oneShot }

var testNames = map[string]string{"locks": "syncguard_locks", "fences": "syncguard_fence_counters", "waiters": "syncguard_locks_waiters"}

func newTest(t *testing.T, d fakeDialect) (*deployment, sqlmock.Sqlmock) {
	t.Helper()
	db, mock, err := sqlmock.New(sqlmock.QueryMatcherOption(sqlmock.QueryMatcherEqual))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	tg := Target{DB: db, Dialect: d, OneShot: d.oneShot, Names: testNames}
	return &deployment{ctx: context.Background(), t: tg, q: pooler.Unprepared(db, d.oneShot)}, mock
}

func findings(d *deployment) map[string]Finding {
	m := map[string]Finding{}
	for _, f := range d.findings {
		m[f.Check] = f
	}
	return m
}

// TestChecksRunOnTheBackendsStatementPath: the checks send their
// statements as the Backend sends an unprepared one (pooler.Statement):
// with the dialect's one-shot arguments first, or with the arguments
// inlined as literals and none sent. Through db.QueryRowContext the
// arguments would go out as they are, prepared by a driver with a
// statement cache: what a pooler in transaction mode loses.
func TestChecksRunOnTheBackendsStatementPath(t *testing.T) {
	d, mock := newTest(t, fakeDialect{oneShot: []any{"one-shot"}})
	mock.ExpectQuery(`SELECT current_setting('synchronous_commit'), current_setting('fsync')`).WithArgs("one-shot").
		WillReturnRows(sqlmock.NewRows([]string{"s", "f"}).AddRow("on", "on"))
	d.durability()

	d2, mock2 := newTest(t, fakeDialect{}) // no one-shot arguments: inlined
	mock2.ExpectQuery(`SELECT to_regclass(E'"syncguard_locks_waiters"'::text) IS NOT NULL,
  (SELECT string_agg(p, ', ') FROM unnest(E'{SELECT,INSERT,UPDATE,DELETE}'::text[]) AS p
   WHERE to_regclass(E'"syncguard_locks_waiters"'::text) IS NOT NULL AND NOT has_table_privilege(to_regclass(E'"syncguard_locks_waiters"'::text), p)),
  E'near'::text <> '' AND to_regclass(E'"syncguard_locks_waiters"'::text) IS NOT NULL AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_attribute AS a
   WHERE a."attrelid" = to_regclass(E'"syncguard_locks_waiters"'::text) AND a."attname" = E'near'::text AND NOT a."attisdropped")`).
		WithoutArgs().WillReturnRows(sqlmock.NewRows([]string{"e", "m", "o"}).AddRow(true, nil, false))
	d2.waitersTableCheck()

	for _, c := range []struct {
		d     *deployment
		mock  sqlmock.Sqlmock
		check string
	}{{d, mock, "synchronous_commit"}, {d2, mock2, "waiters table"}} {
		if err := c.mock.ExpectationsWereMet(); err != nil {
			t.Error(err)
		}
		if f := findings(c.d)[c.check]; f.Status != OK {
			t.Errorf("%s: %+v", c.check, f)
		}
	}
}

// TestLostPreparedStatementIsOneRule: an 08P01 from a Bind that reached
// another client's statement is a lost prepared statement for
// doctor.Check as for the Backend (pooler.StatementLost): the failed
// "prepared statements" finding, once.
func TestLostPreparedStatementIsOneRule(t *testing.T) {
	d, _ := newTest(t, fakeDialect{})
	lost := &sqlErr{code: "08P01", msg: `bind message supplies 1 parameters, but prepared statement "stmtcache_9" requires 2`}
	d.couldNot("fsync", lost)
	d.couldNot("clock", lost)
	d.couldNot("lock rows", &sqlErr{code: "08P01", msg: "invalid message format"})
	n := 0
	for _, f := range d.findings {
		if f.Check == "prepared statements" {
			n++
			if f.Status != Fail || !strings.Contains(f.Detail, "SQLSTATE 08P01") || !strings.Contains(f.Fix, "DisablePrepare") {
				t.Errorf("prepared statements: %+v", f)
			}
		}
	}
	if n != 1 {
		t.Errorf("want one failed prepared statements finding, got %d: %+v", n, d.findings)
	}
}

// TestPoolerCheckUsesTheBackendsDetector: a pooler that answers for the
// server (announced pid not the session's) is reported as the Backend
// sees it, even in session mode.
func TestPoolerCheckUsesTheBackendsDetector(t *testing.T) {
	d, mock := newTest(t, fakeDialect{announced: 4242, oneShot: []any{}})
	d.t.NoPrepare = true
	pid := func(p int) *sqlmock.Rows { return sqlmock.NewRows([]string{"pid"}).AddRow(p) }
	mock.ExpectQuery("SELECT pg_backend_pid()").WillReturnRows(pid(17)) // Detect
	mock.ExpectQuery("SELECT pg_backend_pid()").WillReturnRows(pid(17)) // a
	for range 3 {
		mock.ExpectBegin()
		mock.ExpectQuery("SELECT pg_backend_pid()").WillReturnRows(pid(18)) // b, in its transaction
		mock.ExpectQuery("SELECT pg_backend_pid()").WillReturnRows(pid(17)) // a
		mock.ExpectRollback()
	}
	d.pooler()
	if err := mock.ExpectationsWereMet(); err != nil {
		t.Fatal(err)
	}
	f := findings(d)["pooler"]
	if f.Status != OK || !strings.Contains(f.Detail, "announced backend pid 4242, its server session is pid 17") || !strings.Contains(f.Detail, "session mode") {
		t.Errorf("pooler: %+v", f)
	}
}
