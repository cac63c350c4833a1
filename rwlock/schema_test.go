package rwlock

import (
	"errors"
	"strings"
	"testing"

	"github.com/syncguard/syncguard-go/syncguard"
)

// TestRender renders every statement file (render panics on a template
// error) and checks the names are quoted and the mutex's tables absent.
func TestRender(t *testing.T) {
	ddl, err := SchemaSQL(&syncguard.Config{TableName: "My_Locks"})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"My_Locks_rw"`, `"My_Locks_rw_keys"`, `"My_Locks_rw_waiters"`, `"My_Locks_rw_acquire"`} {
		if !strings.Contains(ddl, want) {
			t.Errorf("DDL lacks %s", want)
		}
	}
	if strings.Contains(ddl, `"My_Locks" `) || strings.Contains(ddl, "syncguard_fence_counters") {
		t.Error("the DDL touches the mutex's tables")
	}
	for _, f := range []string{"call_acquire.sql", "call_release.sql", "extend.sql", "holders.sql", "writer_fence.sql", "list.sql"} {
		if s := render(f, "t"); strings.Contains(s, "{{") {
			t.Errorf("%s: unexpanded template", f)
		}
	}
}

func TestInvalidConfig(t *testing.T) {
	if _, err := SchemaSQL(&syncguard.Config{TableName: "bad name"}); !errors.Is(err, syncguard.ErrInvalidArgument) {
		t.Errorf("bad table name: %v", err)
	}
	if _, err := New(nil, nil); !errors.Is(err, syncguard.ErrInvalidArgument) {
		t.Errorf("nil db: %v", err)
	}
}
