package pgxstd_test

import (
	"context"
	"testing"

	"github.com/syncguard/syncguard-go/conformance"
	"github.com/syncguard/syncguard-go/internal/pgtest"
	"github.com/syncguard/syncguard-go/pgxstd"
)

func TestMain(m *testing.M) { pgtest.Main(m, pgtest.Options{}) }

func TestConformance(t *testing.T) {
	srv := pgtest.Require(t)
	h := conformance.Harness{
		Open:              conformance.Opener("pgx", srv.DSN),
		Dialect:           pgxstd.Dialect,
		OpenRefused:       conformance.Opener("pgx", srv.RefusedDSN()),
		OpenWrongPassword: conformance.Opener("pgx", srv.DSNFor(srv.PasswordRole, "wrong-password", "postgres")),
	}
	if srv.CanRestart() {
		h.Restart = func(ctx context.Context) error { return srv.Restart(ctx) }
	}
	conformance.Run(t, h)
}
