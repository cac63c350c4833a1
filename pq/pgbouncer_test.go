package pq_test

import (
	"testing"

	"github.com/syncguard/syncguard-go/conformance"
	"github.com/syncguard/syncguard-go/internal/pgtest"
	sgpq "github.com/syncguard/syncguard-go/pq"
	"github.com/syncguard/syncguard-go/syncguard"
)

// TestConformanceThroughPgBouncer runs the whole conformance suite through
// PgBouncer in transaction pooling mode (pool_mode=transaction), started by
// pgtest in front of the throwaway cluster.
//
// PgBouncer before 1.21 (Debian 12 ships 1.18) cannot route prepared
// statements in transaction mode: consecutive messages of one client may
// run on different server connections. With lib/pq that needs both
//
//   - syncguard.Config.DisablePrepare: no named statements (lib/pq's
//     Prepare fails with 42P05 "prepared statement already exists" or 26000
//     "does not exist"), and
//   - binary_parameters=yes in the DSN: lib/pq then sends an unprepared
//     parameterized query as Parse/Bind/Execute/Sync in one round trip.
//     Without it, lib/pq sends Parse/Describe/Sync, waits, then
//     Bind/Execute/Sync: PgBouncer may run the second half on another
//     server connection, which fails with 26000 "unnamed prepared
//     statement does not exist".
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
	const params = "&binary_parameters=yes&connect_timeout=5"
	h := conformance.Harness{
		Open:        conformance.Opener("postgres", bouncer.DSN+params),
		Dialect:     sgpq.Dialect,
		OpenRefused: conformance.Opener("postgres", srv.RefusedDSN()),
		// PgBouncer rejects a wrong password itself, with SQLSTATE 08P01;
		// syncguard recognises its message and reports AuthFailed.
		OpenWrongPassword: conformance.Opener("postgres", bouncer.DSNFor(srv.PasswordRole, "wrong-password", "postgres")+params),
		Config:            func(c *syncguard.Config) { c.DisablePrepare = true },
		NoSessionState:    true,
	}
	conformance.Run(t, h)
	if t.Failed() {
		t.Logf("--- pgbouncer log (tail) ---\n%s", bouncer.LogTail(40))
	}
}
