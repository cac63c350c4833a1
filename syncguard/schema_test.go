package syncguard

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/DATA-DOG/go-sqlmock"

	"github.com/syncguard/syncguard-go/internal/deploy"
)

func TestSchemaSQLQuotesAndNames(t *testing.T) {
	ddl, err := SchemaSQL(&Config{TableName: "AppLocks", FenceTableName: "AppFences"})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`CREATE TABLE IF NOT EXISTS "AppLocks"`, `"idx_AppLocks_lock_id" ON "AppLocks" ("lock_id")`,
		`"idx_AppLocks_expires" ON "AppLocks" ("expires_at_ms")`, `CREATE TABLE IF NOT EXISTS "AppFences"`, `"key_debug" TEXT`,
		`CREATE UNLOGGED TABLE IF NOT EXISTS "AppLocks_waiters"`, `"idx_AppLocks_wkey" ON "AppLocks_waiters" ("key", "place", "lock_id")`} {
		if !strings.Contains(ddl, want) {
			t.Errorf("DDL lacks %s", want)
		}
	}
	// The output is read by DBAs and migration tools: no template syntax
	// and no talk of it.
	if strings.Contains(ddl, "{{") || strings.Contains(strings.ToLower(ddl), "placeholder") {
		t.Errorf("the rendered DDL mentions the template it came from:\n%s", ddl)
	}
	stmts := deploy.SplitStatements(ddl)
	if n := len(stmts); n != 18 {
		t.Errorf("want 18 statements (the spec's 4, the waiters table's 4, the holders table's 2, 8 statement functions), got %d", n)
	}
	for _, st := range stmts[10:] {
		if !strings.HasPrefix(st, `DO $do$ BEGIN IF to_regprocedure(quote_ident(current_schema()) || '.' || '"AppLocks_op_`) || !strings.HasSuffix(st, "END $do$") {
			t.Errorf("a statement function was split or is misnamed:\n%.200s ... %s", st, st[max(0, len(st)-40):])
		}
	}
	// The repository's schema.sql is the default rendering.
	def, _ := SchemaSQL(nil)
	file, err := os.ReadFile("../schema.sql")
	if err != nil || string(file) != def {
		t.Errorf("schema.sql at the repository root must equal SchemaSQL(nil); regenerate it with `go run ./tools/genschema` (%v)", err)
	}
}

// A table name equal to an object SetupSchema creates (an index of the
// other table, a primary-key index) would make CREATE ... IF NOT EXISTS
// skip one of them and every later operation fail (42809): New, SchemaSQL
// and SetupSchema reject it before any I/O.
func TestSchemaObjectNameCollisionsRejectedBeforeIO(t *testing.T) {
	db, mock, _ := sqlmock.New()
	defer db.Close()
	for _, c := range []Config{
		{FenceTableName: "idx_syncguard_locks_lock_id"},
		{FenceTableName: "idx_syncguard_locks_expires"},
		{FenceTableName: "syncguard_locks_pkey"},
		{TableName: "locks", FenceTableName: "idx_locks_lock_id"},
		{TableName: "syncguard_fence_counters_pkey"},
		{TableName: "f_pkey", FenceTableName: "f"},
	} {
		c.Dialect = fakeDialect{}
		_, err := New(db, &c)
		wantCode(t, err, ErrInvalidArgument)
		if err != nil && !strings.Contains(err.Error(), "SetupSchema would skip") {
			t.Errorf("%+v: the message must say what collides: %v", c, err)
		}
		_, err = SchemaSQL(&c)
		wantCode(t, err, ErrInvalidArgument)
		wantCode(t, SetupSchema(context.Background(), db, &c), ErrInvalidArgument)
	}
	if err := mock.ExpectationsWereMet(); err != nil {
		t.Fatalf("no I/O for a rejected configuration: %v", err)
	}
	// Near misses are fine: names are quoted, so case matters.
	for _, c := range []Config{
		{FenceTableName: "IDX_syncguard_locks_lock_id"},
		{TableName: "locks", FenceTableName: "idx_locks_lock"},
	} {
		c.Dialect = fakeDialect{}
		if _, err := New(db, &c); err != nil {
			t.Errorf("%+v rejected: %v", c, err)
		}
	}
}
