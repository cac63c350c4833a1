package itest_test

import (
	"testing"

	"github.com/syncguard/syncguard-go/conformance"
	"github.com/syncguard/syncguard-go/pgxstd"
	sgpq "github.com/syncguard/syncguard-go/pq"
	"github.com/syncguard/syncguard-go/tests/pgtest"
	"github.com/syncguard/syncguard-go/tests/pgtest/suite"
)

// The conformance runs spend their time waiting (expiries, TTLs,
// wake-ups): six cases at once instead of two halve the package's time on
// 2 cores; the server gets the connections for it.
func TestMain(m *testing.M) {
	pgtest.MinParallel(6)
	pgtest.Main(m, pgtest.Options{MaxConnections: 400})
}

// lib/pq behind PgBouncer 1.18 in transaction mode needs
// binary_parameters=yes: lib/pq then sends an unprepared parameterized query
// as Parse/Bind/Execute/Sync in one round trip. Without it, lib/pq sends
// Parse/Describe/Sync, waits, then Bind/Execute/Sync, and PgBouncer may run
// the second half on another server connection (26000 "unnamed prepared
// statement does not exist", or another client's statement).
//
// pq.ListenDialect gives lib/pq the DSN for its LISTEN connection, so that
// waiting is woken on release (directly; PgBouncer in transaction mode does
// not forward notifications, and waiting falls back to polling there).
var pqDriver = suite.Driver{Name: "postgres", Dialect: sgpq.Dialect, DialectFor: sgpq.ListenDialect, PgBouncerParams: "&binary_parameters=yes"}

// pgx behind PgBouncer 1.18 in transaction mode needs
// default_query_exec_mode=exec (or simple_protocol, or cache_describe):
// pgx's default, cache_statement, prepares every query as a named server
// statement, which PgBouncer cannot route. exec sends each query unnamed,
// Parse/Bind/Describe/Execute/Sync in one round trip.
var pgxDriver = suite.Driver{Name: "pgx", Dialect: pgxstd.Dialect, PgBouncerParams: "&default_query_exec_mode=exec"}

// The conformance suite against each adapter, directly and through PgBouncer
// in transaction mode. The PgBouncer runs are long suites, left to `make
// check` (pgtest.Long); `make test` runs the direct ones.
func TestConformancePQ(t *testing.T) { suite.Run(t, pqDriver) }
func TestConformancePQThroughPgBouncer(t *testing.T) {
	pgtest.Long(t, "the conformance suite through PgBouncer")
	suite.RunThroughPgBouncer(t, pqDriver)
}
func TestConformancePGX(t *testing.T) { suite.Run(t, pgxDriver) }
func TestConformancePGXThroughPgBouncer(t *testing.T) {
	pgtest.Long(t, "the conformance suite through PgBouncer")
	suite.RunThroughPgBouncer(t, pgxDriver)
}

// The suite through PgBouncer with every setting at its default: prepared
// statements on and a plain DSN, which PgBouncer 1.18 in transaction mode
// breaks unless the Backend notices (issue 14, item 4).
func TestConformancePQThroughPgBouncerPrepared(t *testing.T) {
	pgtest.Long(t, "the conformance suite through PgBouncer, prepared statements on")
	suite.RunThroughPgBouncerPrepared(t, pqDriver)
}
func TestConformancePGXThroughPgBouncerPrepared(t *testing.T) {
	pgtest.Long(t, "the conformance suite through PgBouncer, prepared statements on")
	suite.RunThroughPgBouncerPrepared(t, pgxDriver)
}

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
