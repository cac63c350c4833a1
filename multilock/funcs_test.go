package multilock

import (
	"strings"
	"testing"

	"github.com/syncguard/syncguard-go/syncguard"
)

// TestStatementFunctions: acquire, release and extend each have a
// function in SchemaSQL that runs the statement (its lock NOWAIT) and, on
// a row locked by another, locks first (the statement's own CTEs up to g,
// waiting) and then runs the statement again; the
// statements sent as themselves wait for their lock; a TableName too long
// for a function's name leaves the statements as themselves.
func TestStatementFunctions(t *testing.T) {
	tb, err := TablesOf(&syncguard.Config{TableName: "app_locks"})
	if err != nil {
		t.Fatal(err)
	}
	st := tb.statements()
	ddl, _ := SchemaSQL(&syncguard.Config{TableName: "app_locks"})
	if len(st.fns) != numOps {
		t.Fatalf("%d functions, want %d", len(st.fns), numOps)
	}
	for i, f := range st.fns {
		if st.call[i] != f.Call || !strings.HasPrefix(f.Name, "app_locks_ml_op_") || !strings.Contains(ddl, f.DDL) {
			t.Errorf("%s: call %q, name %q, in SchemaSQL: %v", opFiles[i], st.call[i], f.Name, strings.Contains(ddl, f.DDL))
		}
		_, rest, ok1 := strings.Cut(f.DDL, "EXCEPTION WHEN lock_not_available THEN NULL; END; PERFORM 1 FROM (WITH")
		perform, body, ok2 := strings.Cut(rest, "; RETURN QUERY\n")
		if !ok1 || !ok2 || !strings.Contains(perform, "FOR UPDATE \n") ||
			strings.Contains(perform, "NOWAIT") || strings.Contains(perform, "chk AS") {
			t.Errorf("%s: the lock step is not the statement's CTEs up to g, waiting:\n%s", opFiles[i], perform)
		}
		if !strings.Contains(body, "FOR UPDATE NOWAIT") || !strings.Contains(body, "chk AS") {
			t.Errorf("%s: the statement in the function does not take its lock NOWAIT:\n%s", opFiles[i], body)
		}
		if strings.Contains(st.plain[i], "NOWAIT") || !strings.Contains(st.plain[i], "FOR UPDATE") {
			t.Errorf("%s: the statement sent as itself must wait for its lock", opFiles[i])
		}
	}
	long, err := TablesOf(&syncguard.Config{TableName: strings.Repeat("x", maxFuncPrefix-len("_ml")+1)})
	if err != nil {
		t.Fatal(err)
	}
	if ls := long.statements(); len(ls.fns) != 0 || ls.call != [numOps]string{} || ls.plain[opAcquire] == "" {
		t.Errorf("a name too long for a function: %d functions", len(ls.fns))
	}
}
