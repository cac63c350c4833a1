package stmtfunc

import (
	"strings"
	"testing"
)

func TestNewDerivesTheSignature(t *testing.T) {
	f, err := New("t", "text, bigint", `SELECT $2::text, $1::bigint + $1::bigint FROM "x" WHERE "k" = $3::boolean`)
	if err != nil {
		t.Fatal(err)
	}
	if f.Args != "bigint,text,boolean" || !strings.HasPrefix(f.Name, "t_op_") || len(f.Name) != len("t_op_")+8 {
		t.Errorf("got name %q args %q", f.Name, f.Args)
	}
	if f.Call != `SELECT * FROM "`+f.Name+`"($1::bigint, $2::text, $3::boolean)` {
		t.Errorf("call %q", f.Call)
	}
	if !strings.Contains(f.DDL, "RETURNS TABLE (r1 text, r2 bigint)") || strings.Count(f.DDL, ";\n") != 1 || !strings.HasSuffix(f.DDL, "END $do$;\n") ||
		!strings.Contains(f.DDL, `'"`+f.Name+`"(bigint,text,boolean)') IS NULL THEN CREATE FUNCTION "`+f.Name+`"(bigint, text, boolean)`) {
		t.Errorf("DDL:\n%s", f.DDL)
	}
	g, _ := New("t", "text, bigint", `SELECT $2::text, $1::bigint + $1::bigint FROM "x" WHERE "k" = $3::boolean AND true`)
	if g.Name == f.Name {
		t.Errorf("another statement must have another name")
	}
	for _, bad := range []string{`SELECT $1::text, $1::bigint`, `SELECT $1::text, $2`, `SELECT $2::text`, `SELECT 1; SELECT $1::text`, `SELECT '$syncguard$', $1::text`, "SELECT $1::text -- x", `SELECT $1::text[]`, `SELECT $1::varchar(3)`, `SELECT $1::double precision`} {
		if _, err := New("t", "text", bad); err == nil {
			t.Errorf("New accepted %q", bad)
		}
	}
}

func TestMissing(t *testing.T) {
	for _, c := range []struct {
		state, msg string
		want       bool
	}{
		{"42883", `function "app_op_12345678"(text) does not exist`, true},
		{"42501", `permission denied for function app_op_12345678`, true},
		{"42883", `function sha256(text) does not exist`, false},
		{"42501", `permission denied for table app`, false},
		{"42P01", `relation "app_op_12345678" does not exist`, false},
		{"42501", `permission denied for table app_op_fences`, false},
		{"42501", `permission denied for function xapp_op_12345678`, false},
		{"42804", `structure of query does not match function result type`, true},
	} {
		if got := Missing("app", c.state, c.msg); got != c.want {
			t.Errorf("Missing(%s, %q) = %v", c.state, c.msg, got)
		}
	}
}

func TestNewLockedRunsTheLockFirst(t *testing.T) {
	lock := `SELECT 1 FROM "c" WHERE "k" = $1::text ORDER BY "k" FOR UPDATE`
	body := `SELECT $2::bigint FROM "c" WHERE "k" = $1::text FOR UPDATE NOWAIT`
	f, err := NewLocked("t", "bigint", lock, body)
	if err != nil {
		t.Fatal(err)
	}
	want := "BEGIN\nBEGIN RETURN QUERY\n" + body + "; RETURN; EXCEPTION WHEN lock_not_available THEN NULL; END; " +
		"PERFORM 1 FROM \"c\" WHERE \"k\" = $1::text ORDER BY \"k\" FOR UPDATE; RETURN QUERY\n" + body + "; END\n"
	if f.Args != "text,bigint" || !strings.Contains(f.DDL, want) || strings.Count(f.DDL, ";\n") != 1 {
		t.Errorf("args %q, DDL:\n%s", f.Args, f.DDL)
	}
	if g, _ := New("t", "bigint", body); g.Name == f.Name {
		t.Errorf("a function with a lock step must have another name")
	}
	for _, bad := range [][2]string{{`UPDATE "c" SET "k" = $1::text`, body}, {`SELECT 1; SELECT 2`, body}, {`SELECT $1::bigint`, body}} {
		if _, err := NewLocked("t", "bigint", bad[0], bad[1]); err == nil {
			t.Errorf("NewLocked accepted the lock %q", bad[0])
		}
	}
}
