package pgtest

import (
	"os"
	"strconv"
	"strings"
	"testing"
)

func TestPgBouncer(t *testing.T) {
	s := Require(t)
	if s.Kind == KindEnv {
		t.Skip("StartPgBouncer needs a local or docker server")
	}
	b := RequirePgBouncer(t, s, PgBouncerOptions{})
	t.Logf("pgbouncer %s on port %d (pool_mode=%s)", b.Version, b.Port, b.PoolMode)
	if b.PoolMode != "transaction" {
		t.Fatalf("pool mode %q", b.PoolMode)
	}
	if got := psql(t, b.DSN, "select current_user, current_setting('port')"); got != "postgres|"+itoa(s.Port) {
		t.Fatalf("through pgbouncer: %q", got)
	}
	// The password role logs in through PgBouncer with its password, and
	// PgBouncer logs in to the server with it.
	if got := psql(t, b.DSNFor(s.PasswordRole, s.Password, ""), "select current_user"); got != s.PasswordRole {
		t.Fatalf("password role through pgbouncer: %q", got)
	}
	if _, err := runPsql(testCtx(t), b.DSNFor(s.PasswordRole, "wrong", ""), "select 1"); err == nil ||
		!strings.Contains(err.Error(), "authentication failed") {
		t.Fatalf("wrong password through pgbouncer: err = %v", err)
	}
	out, err := b.Admin(testCtx(t), "SHOW CONFIG")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "pool_mode|transaction") {
		t.Fatalf("SHOW CONFIG has no pool_mode|transaction:\n%s", out)
	}
	dir := b.dir
	if err := b.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("%s still exists after Stop", dir)
	}
	if _, err := runPsql(testCtx(t), b.DSN, "select 1"); err == nil {
		t.Fatal("pgbouncer still answers after Stop")
	}
}

func TestPgBouncerVersionAtLeast(t *testing.T) {
	for v, want := range map[string]bool{"1.18.0": false, "1.21.0": true, "1.21": true, "1.9": false, "2.0": true} {
		if got := versionAtLeast(v, 1, 21); got != want {
			t.Errorf("versionAtLeast(%q, 1, 21) = %v", v, got)
		}
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
