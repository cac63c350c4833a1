package pgtest

import (
	"context"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestMain(m *testing.M) { Main(m, Options{}) }

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func psql(t *testing.T, dsn, sql string, env ...string) string {
	t.Helper()
	out, err := runPsql(testCtx(t), dsn, sql, env...)
	if err != nil {
		t.Fatalf("psql %q: %v", sql, err)
	}
	return strings.TrimSpace(out)
}

func TestSelect1(t *testing.T) {
	s := Require(t)
	t.Logf("kind=%s dsn=%s", s.Kind, s.DSN)
	if got := psql(t, s.DSN, "select 1"); got != "1" {
		t.Fatalf("select 1 = %q", got)
	}
	if s.Kind != KindEnv {
		if got := psql(t, s.DSN, "select current_setting('max_connections'), current_setting('fsync')"); got != "200|off" {
			t.Fatalf("max_connections|fsync = %q, want 200|off", got)
		}
	}
}

func TestPasswordRole(t *testing.T) {
	s := Require(t)
	if s.PasswordRole == "" {
		t.Skip("no password role for the env kind")
	}
	ctx := testCtx(t)
	dsn := s.DSNFor(s.PasswordRole, "", "postgres")
	out, err := runPsql(ctx, dsn, "select current_user", "PGPASSWORD="+s.Password)
	if err != nil {
		t.Fatalf("right password: %v", err)
	}
	if got := strings.TrimSpace(out); got != s.PasswordRole {
		t.Fatalf("current_user = %q", got)
	}
	if _, err := runPsql(ctx, s.DSNFor(s.PasswordRole, s.Password, ""), "select 1"); err != nil {
		t.Fatalf("password in DSN: %v", err)
	}
	_, err = runPsql(ctx, dsn, "select 1", "PGPASSWORD=wrong-"+s.Password)
	if err == nil || !strings.Contains(err.Error(), "password authentication failed") {
		t.Fatalf("wrong password: err = %v, want password authentication failed", err)
	}
	_, err = runPsql(ctx, dsn, "select 1") // no password at all: not trusted
	if err == nil {
		t.Fatal("no password: connected")
	}
	if got := psql(t, s.DSN, "select rolpassword like 'SCRAM-SHA-256$%' from pg_authid where rolname = '"+s.PasswordRole+"'"); got != "t" {
		t.Fatalf("password is not scram-sha-256: %q", got)
	}
}

func TestCreateDatabaseAndRestart(t *testing.T) {
	s := Require(t)
	ctx := testCtx(t)
	dsn, err := s.CreateDatabase(ctx, "pgtest_restart")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateDatabase(ctx, "pgtest_restart"); err != nil {
		t.Fatalf("second CreateDatabase: %v", err)
	}
	if got := psql(t, dsn, "select current_database()"); got != "pgtest_restart" {
		t.Fatalf("current_database() = %q", got)
	}
	psql(t, dsn, "drop table if exists t; create table t (v text); insert into t values ('survives')")

	if !s.CanRestart() {
		if err := s.Restart(ctx); err == nil {
			t.Fatal("Restart of a non-restartable server did not fail")
		}
		t.Skipf("kind %s cannot restart", s.Kind)
	}
	before := psql(t, s.DSN, "select pg_postmaster_start_time()")
	start := time.Now()
	if err := s.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("restart took %v", time.Since(start))
	if after := psql(t, s.DSN, "select pg_postmaster_start_time()"); after == before {
		t.Fatalf("postmaster start time unchanged (%s): no restart", after)
	}
	if got := psql(t, dsn, "select v from t"); got != "survives" {
		t.Fatalf("after restart: %q", got)
	}
}

func TestRefusedDSN(t *testing.T) {
	s := Require(t)
	_, err := runPsql(testCtx(t), s.RefusedDSN(), "select 1")
	if err == nil || !strings.Contains(err.Error(), "refused") {
		t.Fatalf("err = %v, want connection refused", err)
	}
}

// TestStartOptions starts a second throwaway cluster with non-default
// options and checks that Stop removes it.
func TestStartOptions(t *testing.T) {
	s := Require(t)
	if s.Kind != KindLocal {
		t.Skipf("kind %s", s.Kind)
	}
	ctx := testCtx(t)
	start := time.Now()
	s2, err := Start(ctx, Options{Fsync: true, MaxConnections: 37})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Start took %v", time.Since(start))
	defer s2.Stop()
	if s2.Port == s.Port {
		t.Fatalf("same port %d", s.Port)
	}
	if got := psql(t, s2.DSN, "select current_setting('max_connections'), current_setting('fsync'), current_setting('full_page_writes')"); got != "37|on|on" {
		t.Fatalf("settings = %q", got)
	}
	dir := s2.local.dir
	if err := s2.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := s2.Stop(); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("%s still exists after Stop (err %v)", dir, err)
	}
	if _, err := runPsql(ctx, s2.DSN, "select 1"); err == nil {
		t.Fatal("server still answers after Stop")
	}
}

// TestPortTaken makes the first start attempt collide with a port in use
// and checks that Start retries with another one.
func TestPortTaken(t *testing.T) {
	s := Require(t)
	if s.Kind != KindLocal {
		t.Skipf("kind %s", s.Kind)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	taken := l.Addr().(*net.TCPAddr).Port
	calls := 0
	pickPort = func() (int, error) {
		calls++
		if calls == 1 {
			return taken, nil
		}
		return freePort()
	}
	defer func() { pickPort = freePort }()
	s2, err := Start(testCtx(t), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Stop()
	if calls != 2 || s2.Port == taken {
		t.Fatalf("calls=%d port=%d taken=%d", calls, s2.Port, taken)
	}
	psql(t, s2.DSN, "select 1")
}

func TestDSNFor(t *testing.T) {
	cases := []struct {
		dsn, user, pw, db, want string
	}{
		{"postgres://postgres@127.0.0.1:5433/postgres?sslmode=disable", "u", "p w", "d",
			"postgres://u:p%20w@127.0.0.1:5433/d?sslmode=disable"},
		{"postgres://postgres@127.0.0.1:5433/postgres?sslmode=disable", "", "", "other",
			"postgres://postgres@127.0.0.1:5433/other?sslmode=disable"},
		{"postgres://a:b@h/x", "c", "", "",
			"postgres://c@h/x"},
		{"host=h port=5 user=a password='x y' dbname=x sslmode=disable", "u", "it's", "d",
			`host=h port=5 sslmode=disable user=u password='it\'s' dbname=d`},
		{"host=h user=a password=b", "", "", "d",
			"host=h user=a password=b dbname=d"},
	}
	for _, c := range cases {
		p, err := parseDSN(c.dsn)
		if err != nil {
			t.Fatalf("%s: %v", c.dsn, err)
		}
		if got := p.with(c.user, c.pw, c.db); got != c.want {
			t.Errorf("with(%q, %q, %q) on %q =\n %q, want\n %q", c.user, c.pw, c.db, c.dsn, got, c.want)
		}
	}
	for dsn, want := range map[string]string{
		"postgres://u@10.0.0.1:6000/db": "10.0.0.1:6000",
		"postgres:///db?host=/tmp":      "/tmp:5432",
		"host=h1,h2 port=7,8":           "h1:7",
		"dbname=x":                      ":5432",
	} {
		p, err := parseDSN(dsn)
		if err != nil {
			t.Fatal(err)
		}
		host, port := p.hostPort()
		if got := host + ":" + strconv.Itoa(port); got != want {
			t.Errorf("hostPort(%q) = %q, want %q", dsn, got, want)
		}
	}
}
