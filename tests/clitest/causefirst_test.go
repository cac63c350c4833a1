//go:build unix

package clitest

import (
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/syncguard/syncguard-go/syncguard"
)

// A wrong password reads as a wrong password with pgx and no sslmode in the
// DSN (pgx then tries TLS first, and against a server without TLS its
// error joins "server refused TLS connection" before the real cause): the
// CLI's message and the *Error's text give the cause, without the TLS
// attempt, which stays reachable through the error chain.
func TestWrongPasswordWithoutSSLModeReadsAsWrongPassword(t *testing.T) {
	t.Parallel()
	srv := passwordRole(t)
	u, err := url.Parse(srv.DSNFor(srv.PasswordRole, srv.Password+"-wrong", "syncguard_cli"))
	if err != nil {
		t.Skipf("the server's DSN is not a URL: %v", err)
	}
	q := u.Query()
	q.Del("sslmode")
	u.RawQuery = q.Encode()
	bad := u.String()

	r := sg(t, "", "--dsn", bad, "status", "k")
	wantCode(t, r, 77)
	wantOneLineError(t, r, "syncguard: status: AuthFailed: PostgreSQL rejected the credentials (SQLSTATE 28P01): ")
	if !strings.Contains(r.stderr, "password authentication failed") || strings.Contains(r.stderr, "TLS") {
		t.Errorf("want the cause, without the TLS attempt: %s", r)
	}

	db := openDB(t, bad)
	b := backend(t, db, nil)
	_, err = b.IsLocked(ctxT(t), "k")
	if !errors.Is(err, syncguard.ErrAuthFailed) || !strings.Contains(err.Error(), "password authentication failed") ||
		strings.Contains(err.Error(), "TLS") {
		t.Fatalf("IsLocked with a wrong password: %v", err)
	}
	var pgErr *pgconn.PgError
	var connErr *pgconn.ConnectError
	if !errors.As(err, &pgErr) || pgErr.Code != "28P01" || !errors.As(err, &connErr) {
		t.Fatalf("the driver's errors must stay in the chain: %v", err)
	}
	if !strings.Contains(connErr.Error(), "server refused TLS connection") {
		t.Logf("the server offers TLS: no fallback to leave out (%v)", connErr)
	}
	t.Logf("reads: %v", err)
}
