//go:build unix

package clitest

import (
	"strings"
	"testing"

	"github.com/syncguard/syncguard-go/tests/pgtest"
)

// passwordRole returns the server and its password-authenticated role (a
// role without privileges on the lock tables), creating the tests'
// database first.
func passwordRole(t *testing.T) *pgtest.Server {
	t.Helper()
	srv := pgtest.Require(t)
	dsn(t) // the database syncguard_cli with the tables
	if srv.PasswordRole == "" {
		t.Skipf("the %s server has no password-authenticated role (SYNCGUARD_TEST_DSN)", srv.Kind)
	}
	return srv
}

// A wrong password is not an outage: exit 77 (EX_NOPERM), AuthFailed, from
// every command that connects, distinct from 69.
func TestWrongPasswordExitsNoPerm(t *testing.T) {
	t.Parallel()
	srv := passwordRole(t)
	bad := srv.DSNFor(srv.PasswordRole, srv.Password+"-wrong", "syncguard_cli")
	for _, args := range [][]string{
		{"status", "k"},
		{"ls"},
		{"run", "--key", "k", "-n", "--", "true"},
	} {
		r := sg(t, bad, args...)
		if r.code != 77 {
			t.Errorf("%q with a wrong password: want exit 77, got %s", args, r)
			continue
		}
		wantOneLineError(t, r, "syncguard: "+args[0]+": AuthFailed: ")
	}
	if code, _ := doctorFindings(t, "", "--dsn", bad); code != 77 {
		t.Errorf("doctor with a wrong password: exit %d, want 77", code)
	}
}

// A database that does not exist (3D000) is a configuration error: exit 64,
// InvalidArgument, saying so; not 69 as if the server were down.
func TestNoSuchDatabaseIsConfiguration(t *testing.T) {
	t.Parallel()
	srv := pgtest.Require(t)
	missing := srv.DSNFor("", "", "no_such_database_here")
	for _, args := range [][]string{
		{"status", "k"},
		{"run", "--key", "k", "-w", "2", "--", "true"},
	} {
		r := sg(t, missing, args...)
		if r.code != 64 {
			t.Errorf("%q on a missing database: want exit 64, got %s", args, r)
			continue
		}
		wantOneLineError(t, r, "syncguard: "+args[0]+": InvalidArgument: the database does not exist")
		if !strings.Contains(r.stderr, "3D000") {
			t.Errorf("%q: the error should carry the SQLSTATE: %s", args, r)
		}
	}
}

// ls as a role without SELECT on the lock table names what it needs, as
// run and doctor do, and exits 77.
func TestLsWithoutSelectNamesGrant(t *testing.T) {
	t.Parallel()
	srv := passwordRole(t)
	r := sg(t, "", "--dsn", srv.DSNFor(srv.PasswordRole, srv.Password, "syncguard_cli"), "ls")
	wantCode(t, r, 77)
	wantOneLineError(t, r, "syncguard: ls: AuthFailed: insufficient privilege")
	if !strings.Contains(r.stderr, `list needs USAGE on the schema of "syncguard_locks" and SELECT on it`) {
		t.Errorf("ls should name the grant it needs: %s", r)
	}
	r = sg(t, "", "--dsn", srv.DSNFor(srv.PasswordRole, srv.Password, "syncguard_cli"), "status", "k")
	wantCode(t, r, 77)
	if !strings.Contains(r.stderr, `needs USAGE on the schema of "syncguard_locks" and SELECT on it`) {
		t.Errorf("status should name the grant it needs: %s", r)
	}
}
