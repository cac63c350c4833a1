package multilock

import (
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/syncguard/syncguard-go/driver"
	"github.com/syncguard/syncguard-go/syncguard"
)

func TestKeysCanonical(t *testing.T) {
	if Keys("b", "a", "c") != Keys("c", "a", "b") {
		t.Fatal("rule: the order keys are named in does not change the set's encoding")
	}
	if Keys("e\u0301") != Keys("\u00e9") {
		t.Fatal("rule: keys are encoded in NFC")
	}
	ks, err := ParseKeys(Keys("b", "a"))
	if err != nil || strings.Join(ks, ",") != "a,b" {
		t.Fatalf("ParseKeys = %v, %v", ks, err)
	}
}

func TestParseRejects(t *testing.T) {
	for what, set := range map[string]string{
		"no prefix": `["a"]`, "bad JSON": "multilock:[a]", "empty": Keys(), "empty key": Keys(""),
		"duplicate": Keys("x", "x"), "NUL": Keys("a\x00"), "too many": Keys(strings.Split(strings.Repeat("k,", MaxKeys)+"z", ",")...),
	} {
		if _, err := ParseKeys(set); syncguard.CodeOf(err) != syncguard.ErrInvalidArgument {
			t.Errorf("%s: got %v, want InvalidArgument", what, err)
		}
	}
}

// TestRender renders every statement file (an unknown template name
// panics) and checks the names of the tables.
func TestRender(t *testing.T) {
	tb, err := TablesOf(&syncguard.Config{TableName: "app_locks"})
	if err != nil {
		t.Fatal(err)
	}
	if tb.Locks != "app_locks_ml" || tb.Fences != "app_locks_ml_fences" || tb.Waiters != "app_locks_ml_waiters" {
		t.Fatalf("tables: %+v", tb)
	}
	for _, f := range []string{"acquire.sql", "release.sql", "extend.sql", "placeholder.sql", "lookup.sql", "schema.sql"} {
		s := tb.render(f)
		if strings.Contains(s, "{{") || !strings.Contains(s, `"app_locks_ml`) {
			t.Errorf("%s renders badly:\n%s", f, s)
		}
	}
	ddl, err := SchemaSQL(nil)
	if err != nil || !strings.Contains(ddl, `"syncguard_locks_ml_waiters"`) {
		t.Fatalf("SchemaSQL(nil): %v", err)
	}
	if _, err := TablesOf(&syncguard.Config{FenceTableName: "syncguard_locks_ml"}); syncguard.CodeOf(err) != syncguard.ErrInvalidArgument {
		t.Fatalf("a fence table named like a multilock table: got %v", err)
	}
	if _, err := TablesOf(&syncguard.Config{TableName: "bad name"}); syncguard.CodeOf(err) != syncguard.ErrInvalidArgument {
		t.Fatalf("a bad TableName: got %v", err)
	}
}

// TestValidationBeforeIO: bad input fails on a Locker whose pool cannot
// connect, with InvalidArgument, before any I/O.
func TestValidationBeforeIO(t *testing.T) {
	if _, err := New(nil, nil); syncguard.CodeOf(err) != syncguard.ErrInvalidArgument {
		t.Fatalf("New(nil): %v", err)
	}
	db := sql.OpenDB(nilConnector{})
	l, err := New(db, &syncguard.Config{Dialect: fakeDialect{}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, set := range []string{Keys(), Keys("a", "a"), "a"} {
		if _, err := l.Acquire(ctx, set, time.Second); syncguard.CodeOf(err) != syncguard.ErrInvalidArgument {
			t.Errorf("Acquire(%q): %v", set, err)
		}
	}
	if _, err := l.Acquire(ctx, Keys("a"), 0); syncguard.CodeOf(err) != syncguard.ErrInvalidArgument {
		t.Errorf("ttl 0: %v", err)
	}
	if _, err := l.Extend(ctx, "x", time.Second); syncguard.CodeOf(err) != syncguard.ErrInvalidArgument {
		t.Errorf("Extend bad lockId: %v", err)
	}
	if _, err := Lock(ctx, l, []string{"a", ""}, nil); syncguard.CodeOf(err) != syncguard.ErrInvalidArgument {
		t.Errorf("Lock empty key: %v", err)
	}
}

// nilConnector is a database/sql connector that fails every connection:
// any I/O shows as its error.
type nilConnector struct{}

func (nilConnector) Connect(context.Context) (sqldriver.Conn, error) {
	panic("multilock: I/O before validation")
}
func (nilConnector) Driver() sqldriver.Driver { return nil }

type fakeDialect struct{}

func (fakeDialect) Name() string                   { return "fake" }
func (fakeDialect) Inspect(error) driver.ErrorInfo { return driver.ErrorInfo{} }

// A duplicate key is named by where it is in the set (its array, in
// Error.Key), not only by its hash; the text still shows no raw key.
func TestParseNamesTheDuplicate(t *testing.T) {
	set := Keys("a", "secret-x", "secret-x")
	_, err := ParseKeys(set)
	var e *syncguard.Error
	if !errors.As(err, &e) || e.Key != set || !strings.Contains(e.Msg, "keys 2 and 3 of the set's array") {
		t.Fatalf("duplicate: %v", err)
	}
	if strings.Contains(err.Error(), "secret") {
		t.Errorf("the error's text shows a raw key: %v", err)
	}
}
