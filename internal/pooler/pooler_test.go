package pooler

import (
	sqldriver "database/sql/driver"
	"errors"
	"slices"
	"testing"
)

// valuer is an argument converted for sending, as syncguard's sentArg.
type valuer struct {
	v    string
	sent bool
}

func (a *valuer) Value() (sqldriver.Value, error) { a.sent = true; return a.v, nil }

func TestStatementInlinesArgs(t *testing.T) {
	sent := &valuer{v: "ü€"}
	for _, c := range []struct {
		query string
		args  []any
		want  string
	}{
		{`SELECT $1::text, $2::bigint`, []any{"a'b", int64(-5)}, `SELECT E'a''b'::text, -5::bigint`},
		{`SELECT $1::text`, []any{`back\slash'; DROP TABLE x; --`}, `SELECT E'back\\slash''; DROP TABLE x; --'::text`},
		{`SELECT "$1", '$1', $1`, []any{"x"}, `SELECT "$1", '$1', E'x'`},
		{`SELECT $10, $1`, []any{"1", "2", "3", "4", "5", "6", "7", "8", "9", "ten"}, `SELECT E'ten', E'1'`},
		{`SELECT $1`, []any{sent}, `SELECT E'ü€'`},
		{`SELECT $1::boolean, $2::bigint`, []any{true, nil}, `SELECT true::boolean, NULL::bigint`},
	} {
		got, args, err := Statement(nil, c.query, c.args)
		if err != nil || got != c.want || args != nil {
			t.Errorf("Statement(nil, %q, %q) = %q, %v, %v; want %q and no arguments", c.query, c.args, got, args, err, c.want)
		}
	}
	if !sent.sent {
		t.Error("an inlined driver.Valuer must be converted (syncguard's sentArg records that its acquire went out)")
	}
	for _, c := range []struct {
		query string
		args  []any
	}{
		{`SELECT $2`, []any{"x"}},
		{`SELECT $1`, []any{"nul\x00"}},
		{`SELECT $1`, []any{3.5}},
		{`SELECT 'open`, nil},
	} {
		if got, _, err := Statement(nil, c.query, c.args); err == nil {
			t.Errorf("Statement(nil, %q, %q) = %q; want an error", c.query, c.args, got)
		}
	}
}

func TestStatementOneShotArgsFirst(t *testing.T) {
	q, args, err := Statement([]any{"mode"}, `SELECT $1::text`, []any{"x"})
	if err != nil || q != `SELECT $1::text` || !slices.Equal(args, []any{"mode", "x"}) {
		t.Errorf("with one-shot arguments the statement keeps its placeholders and gets them first; got %q, %v, %v", q, args, err)
	}
}

// TestStatementLost is the one rule for "a pooler lost a prepared
// statement", which the Backend and doctor.Check share.
func TestStatementLost(t *testing.T) {
	for _, c := range []struct {
		state, msg string
		want       bool
	}{
		{"26000", `prepared statement "stmtcache_1" does not exist`, true},
		{"42P05", `prepared statement "stmtcache_1" already exists`, true},
		{"08P01", "bind message supplies 2 parameters, but prepared statement \"\" requires 1", true},
		{"08P01", "invalid message format", false},
		{"42501", "permission denied for table syncguard_locks", false},
		{"", "connection refused", false},
	} {
		if got := StatementLost(c.state, errors.New(c.msg)); got != c.want {
			t.Errorf("StatementLost(%s, %q) = %v, want %v", c.state, c.msg, got, c.want)
		}
	}
}
