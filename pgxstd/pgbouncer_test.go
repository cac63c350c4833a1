package pgxstd_test

import (
	"testing"

	"github.com/syncguard/syncguard-go/conformance"
	"github.com/syncguard/syncguard-go/internal/pgtest"
	"github.com/syncguard/syncguard-go/pgxstd"
	"github.com/syncguard/syncguard-go/syncguard"
)

// TestConformanceThroughPgBouncer runs the whole conformance suite through
// PgBouncer in transaction pooling mode (pool_mode=transaction), started by
// pgtest in front of the throwaway cluster.
//
// PgBouncer before 1.21 (Debian 12 ships 1.18) cannot route prepared
// statements in transaction mode: consecutive messages of one client may
// run on different server connections. With pgx that needs both
//
//   - syncguard.Config.DisablePrepare: no database/sql prepared statements
//     (pgx's stdlib prepares them as named server statements, which fail
//     with 42P05 "prepared statement already exists" or 26000), and
//   - default_query_exec_mode=exec in the DSN (or simple_protocol, or
//     cache_describe): without it pgx's default, cache_statement, prepares
//     every query as a named statement anyway. exec sends each query as an
//     unnamed statement with Parse/Bind/Describe/Execute/Sync in one round
//     trip; describe_exec would take two round trips and fails like
//     lib/pq without binary_parameters.
//
// Cases that need a server restart, a second driver or a wrong password
// are skipped (no hook), and so are cases that need session state
// (NoSessionState).
func TestConformanceThroughPgBouncer(t *testing.T) {
	srv := pgtest.Require(t)
	if srv.Kind == pgtest.KindEnv {
		t.Skip("PgBouncer is started in front of a local or docker server only")
	}
	bouncer := pgtest.RequirePgBouncer(t, srv, pgtest.PgBouncerOptions{PoolMode: "transaction", DefaultPoolSize: 40})
	t.Logf("PgBouncer %s, pool_mode=%s, port %d", bouncer.Version, bouncer.PoolMode, bouncer.Port)
	const params = "&default_query_exec_mode=exec&connect_timeout=5"
	h := conformance.Harness{
		Open:        conformance.Opener("pgx", bouncer.DSN+params),
		Dialect:     pgxstd.Dialect,
		OpenRefused: conformance.Opener("pgx", srv.RefusedDSN()),
		// PgBouncer rejects a wrong password itself, with SQLSTATE 08P01;
		// syncguard recognises its message and reports AuthFailed.
		OpenWrongPassword: conformance.Opener("pgx", bouncer.DSNFor(srv.PasswordRole, "wrong-password", "postgres")+params),
		Config:            func(c *syncguard.Config) { c.DisablePrepare = true },
		NoSessionState:    true,
	}
	conformance.Run(t, h)
	if t.Failed() {
		t.Logf("--- pgbouncer log (tail) ---\n%s", bouncer.LogTail(40))
	}
}
