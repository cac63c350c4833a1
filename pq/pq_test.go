package pq_test

import (
	"context"
	"testing"

	"github.com/syncguard/syncguard-go/conformance"
	"github.com/syncguard/syncguard-go/internal/pgtest"
	sgpq "github.com/syncguard/syncguard-go/pq"
)

func TestMain(m *testing.M) { pgtest.Main(m, pgtest.Options{}) }

func TestConformance(t *testing.T) {
	srv := pgtest.Require(t)
	h := conformance.Harness{
		Open:              conformance.Opener("postgres", srv.DSN),
		Dialect:           sgpq.Dialect,
		OpenRefused:       conformance.Opener("postgres", srv.RefusedDSN()),
		OpenWrongPassword: conformance.Opener("postgres", srv.DSNFor(srv.PasswordRole, "wrong-password", "postgres")),
	}
	if srv.CanRestart() {
		h.Restart = func(ctx context.Context) error { return srv.Restart(ctx) }
	}
	conformance.Run(t, h)
}
