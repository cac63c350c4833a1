package itest_test

import (
	"testing"

	"github.com/syncguard/syncguard-go/conformance"
	"github.com/syncguard/syncguard-go/internal/pgtest"
	"github.com/syncguard/syncguard-go/pgxstd"
	sgpq "github.com/syncguard/syncguard-go/pq"
)

func TestMain(m *testing.M) { pgtest.Main(m, pgtest.Options{}) }

// TestCrossDriver runs the CrossDriver group with lib/pq as the primary
// driver and pgx as the other, then the reverse.
func TestCrossDriver(t *testing.T) {
	srv := pgtest.Require(t)
	pq := conformance.Opener("postgres", srv.DSN)
	pgx := conformance.Opener("pgx", srv.DSN)
	t.Run("PQPrimaryPGXOther", func(t *testing.T) {
		conformance.Run(t, conformance.Harness{
			Open: pq, Dialect: sgpq.Dialect,
			OpenOther: pgx, OtherDialect: pgxstd.Dialect,
			Groups: []string{"CrossDriver"},
		})
	})
	t.Run("PGXPrimaryPQOther", func(t *testing.T) {
		conformance.Run(t, conformance.Harness{
			Open: pgx, Dialect: pgxstd.Dialect,
			OpenOther: pq, OtherDialect: sgpq.Dialect,
			Groups: []string{"CrossDriver"},
		})
	})
}
