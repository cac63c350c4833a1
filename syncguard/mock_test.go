package syncguard

import (
	"database/sql"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/DATA-DOG/go-sqlmock"

	"github.com/syncguard/syncguard-go/driver"
)

// pgErr stands in for a driver's server error: it carries a SQLSTATE that
// fakeDialect reads, as the pq and pgxstd dialects read theirs.
type pgErr struct{ code, severity, msg string }

func (e *pgErr) Error() string { return "server error " + e.code + " " + e.msg }

// pgBouncerErr is PgBouncer's rejection of a wrong password: 08P01.
type pgBouncerErr struct{ pgErr }

func (e *pgBouncerErr) Error() string { return `FATAL: password authentication failed for user "app"` }
func (e *pgBouncerErr) Unwrap() error { return &e.pgErr }

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

type fakeDialect struct{}

func (fakeDialect) Name() string { return "fake" }

// OneShotArgs: a one-shot statement is sent with its arguments as they are,
// which is what go-sqlmock expects.
func (fakeDialect) OneShotArgs() []any { return []any{} }

// Inspect reports the shapes a real dialect reports for a server error:
// SQLSTATE, severity and the server's message.
func (fakeDialect) Inspect(err error) driver.ErrorInfo {
	var pe *pgErr
	if errors.As(err, &pe) {
		msg := pe.Error()
		var pb *pgBouncerErr
		if errors.As(err, &pb) {
			msg = pb.Error()
		}
		var me *msgErr
		if errors.As(err, &me) {
			msg = me.msg
		}
		return driver.ErrorInfo{SQLState: pe.code, Severity: pe.severity, Message: msg}
	}
	return driver.ErrorInfo{}
}

func newMock(t *testing.T, cfg *Config) (*Backend, sqlmock.Sqlmock) {
	t.Helper()
	db, mock := newMockDB(t)
	if cfg == nil {
		cfg = &Config{}
	}
	cfg.Dialect = fakeDialect{}
	cfg.DisablePrepare = true
	b, err := New(db, cfg)
	if err != nil {
		t.Fatal(err)
	}
	// These tests read the statements' own text; TestStatementFunctionCalls
	// covers their functions.
	b.shared.noFuncs.Store(true)
	return b, mock
}

// newMockDB is a sqlmock pool, closed when the test ends, whose expected
// statements match a statement containing their text; "!text" matches a
// statement without it.
func newMockDB(t *testing.T) (*sql.DB, sqlmock.Sqlmock) {
	t.Helper()
	db, mock, err := sqlmock.New(sqlmock.QueryMatcherOption(sqlmock.QueryMatcherFunc(func(expected, actual string) error {
		if not, ok := strings.CutPrefix(expected, "!"); ok && strings.Contains(actual, not) {
			return errors.New("query contains " + not)
		} else if !ok && !strings.Contains(actual, expected) {
			return errors.New("query does not contain " + expected)
		}
		return nil
	})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db, mock
}

func wantCode(t *testing.T, err error, code Code) {
	t.Helper()
	if err == nil {
		t.Fatalf("want %s error, got nil", code)
	}
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("want *Error %s, got %T %v", code, err, err)
	}
	if e.Code != code || !errors.Is(err, code) {
		t.Fatalf("want code %s, got %s (%v)", code, e.Code, err)
	}
}

const goodID = "AAAAAAAAAAAAAAAAAAAAAA"
