package deploy

import (
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// TestSchemaLayout reads the layout from schema.sql at the repository
// root: syncguard.SchemaSQL with the default names (a test of package
// syncguard keeps the file current).
func TestSchemaLayout(t *testing.T) {
	ddl, err := os.ReadFile("../../schema.sql")
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]string{"locks": "syncguard_locks", "fences": "syncguard_fence_counters",
		"lock_id_index": "idx_syncguard_locks_lock_id", "expires_index": "idx_syncguard_locks_expires",
		"waiters": "syncguard_locks_waiters", "waiters_id_index": "idx_syncguard_locks_wid", "waiters_key_index": "idx_syncguard_locks_wkey"}
	l, err := parseSchema(string(ddl), names)
	if err != nil {
		t.Fatal(err)
	}
	wantLocks := []colLayout{{"key", "text", true}, {"lock_id", "text", true}, {"expires_at_ms", "bigint", true},
		{"acquired_at_ms", "bigint", true}, {"fence", "text", true}, {"user_key", "text", true}}
	wantFences := []colLayout{{"fence_key", "text", true}, {"fence", "bigint", true}, {"key_debug", "text", false}}
	if !reflect.DeepEqual(l.locks.cols, wantLocks) || l.locks.pk != "key" || l.locks.check != "lock table" {
		t.Errorf("lock table layout read from schema.sql: %+v (pk %q)", l.locks.cols, l.locks.pk)
	}
	if !reflect.DeepEqual(l.fences.cols, wantFences) || l.fences.pk != "fence_key" || l.fences.check != "fence table" {
		t.Errorf("fence table layout read from schema.sql: %+v (pk %q)", l.fences.cols, l.fences.pk)
	}
	var got []string
	for _, s := range l.locks.indexes() {
		got = append(got, s.check+"|"+s.name+"|"+s.col+"|"+strings.SplitN(s.fix, "\n", 2)[0])
	}
	want := []string{
		`primary key||key|ALTER TABLE "syncguard_locks" ADD PRIMARY KEY ("key");`,
		`lock_id index|idx_syncguard_locks_lock_id|lock_id|CREATE UNIQUE INDEX IF NOT EXISTS "idx_syncguard_locks_lock_id" ON "syncguard_locks" ("lock_id");`,
		`expiry index|idx_syncguard_locks_expires|expires_at_ms|CREATE INDEX IF NOT EXISTS "idx_syncguard_locks_expires" ON "syncguard_locks" ("expires_at_ms");`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("lock table indexes:\n got %q\nwant %q", got, want)
	}
	if f := l.fences.indexes(); len(f) != 1 || !f[0].primary || f[0].col != "fence_key" || f[0].check != "fence primary key" {
		t.Errorf("fence table indexes: %+v", f)
	}
	// An index of the lock table without a check name is an error, not a
	// check silently skipped.
	delete(names, "expires_index")
	if _, err := parseSchema(string(ddl), names); err == nil {
		t.Error("an index without a check name must fail the parse")
	}
}
