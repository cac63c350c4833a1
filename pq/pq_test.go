package pq_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/syncguard/syncguard-go/conformance"
	"github.com/syncguard/syncguard-go/internal/pgtest"
	sgpq "github.com/syncguard/syncguard-go/pq"
)

func TestMain(m *testing.M) { pgtest.Main(m, pgtest.Options{}) }

func open(t testing.TB, driverName, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open(driverName, dsn)
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(20)
	t.Cleanup(func() { db.Close() })
	return db
}

func TestConformance(t *testing.T) {
	srv := pgtest.Require(t)
	h := conformance.Harness{
		Open:        func(t testing.TB) *sql.DB { return open(t, "postgres", srv.DSN) },
		Dialect:     sgpq.Dialect,
		OpenRefused: func(t testing.TB) *sql.DB { return open(t, "postgres", srv.RefusedDSN()) },
		OpenWrongPassword: func(t testing.TB) *sql.DB {
			return open(t, "postgres", srv.DSNFor(srv.PasswordRole, "wrong-password", "postgres"))
		},
	}
	if srv.CanRestart() {
		h.Restart = func(ctx context.Context) error { return srv.Restart(ctx) }
	}
	conformance.Run(t, h)
}
