// Package suite runs the conformance suite against a pgtest server with
// every hook pgtest can provide, directly and through PgBouncer, so each
// adapter module's test is a few lines that name its driver.
package suite

import (
	"context"
	"database/sql"
	"testing"

	"github.com/syncguard/syncguard-go/conformance"
	"github.com/syncguard/syncguard-go/driver"
	"github.com/syncguard/syncguard-go/syncguard"
	"github.com/syncguard/syncguard-go/tests/pgtest"
)

// Driver is one database/sql driver under test.
type Driver struct {
	// Name is the database/sql driver name: "postgres" (lib/pq), "pgx".
	Name    string
	Dialect driver.Dialect
	// DialectFor, when set, returns the dialect for a pool opened with dsn,
	// instead of Dialect: lib/pq's pq.ListenDialect needs the DSN to open
	// its LISTEN connection.
	DialectFor func(dsn string) driver.Dialect
	// PgBouncerParams are the DSN parameters the driver needs behind
	// PgBouncer 1.18 in transaction mode (see docs/failure-model.md):
	// "&binary_parameters=yes" for lib/pq, "&default_query_exec_mode=exec"
	// for pgx, so that an unprepared statement is one round trip that
	// PgBouncer cannot split across server connections.
	PgBouncerParams string
}

// Run runs the whole suite (both tiers, and the advisory cases) on the server that pgtest.Main started, with the
// refused-connection, wrong-password and (for a local cluster) restart hooks.
func Run(t *testing.T, d Driver) {
	srv := pgtest.Require(t)
	h := conformance.Harness{
		Open:              conformance.Opener(d.Name, srv.DSN),
		Dialect:           d.dialect(srv.DSN),
		OpenRefused:       conformance.Opener(d.Name, srv.RefusedDSN()),
		OpenWrongPassword: wrongPassword(srv, conformance.Opener(d.Name, srv.DSNFor(srv.PasswordRole, "wrong-password", "postgres"))),
	}
	if srv.CanRestart() {
		h.Restart = func(ctx context.Context) error { return srv.Restart(ctx) }
	}
	conformance.Run(t, h)
	conformance.RunAdvisory(t, h)
}

// RunThroughPgBouncer runs the whole suite through a PgBouncer in
// transaction pooling mode started in front of the server.
//
// PgBouncer before 1.21 cannot route prepared statements in transaction
// mode: one client's consecutive messages may run on different server
// connections. So the backends run with syncguard.Config.DisablePrepare,
// and the driver gets PgBouncerParams. A wrong password is rejected by
// PgBouncer itself (SQLSTATE 08P01), which syncguard reports as AuthFailed.
// Cases that need a server restart, or session state (NoSessionState), are
// skipped.
func RunThroughPgBouncer(t *testing.T, d Driver) {
	runThroughPgBouncer(t, d, true)
}

// RunThroughPgBouncerPrepared runs the whole suite through a PgBouncer in
// transaction mode with syncguard's prepared statements on (no
// Config.DisablePrepare), the default. PgBouncer 1.18 cannot route prepared
// statements, so this passes only if each Backend detects the pooler, or
// the errors it causes, and switches to statements that need nothing
// prepared without failing an operation. The DSN keeps PgBouncerParams,
// which the suite's own raw SQL needs; they do not stop database/sql's
// prepared statements (doctor used to suggest them as the fix, and runs
// still failed).
func RunThroughPgBouncerPrepared(t *testing.T, d Driver) {
	runThroughPgBouncer(t, d, false)
}

// runThroughPgBouncer runs the suite through a PgBouncer in transaction
// mode, with syncguard's prepared statements off (Config.DisablePrepare) or
// on.
func runThroughPgBouncer(t *testing.T, d Driver, disablePrepare bool) {
	srv := pgtest.Require(t)
	if srv.Kind == pgtest.KindEnv {
		t.Skip("PgBouncer is started in front of a local or docker server only")
	}
	bouncer := pgtest.RequirePgBouncer(t, srv, pgtest.PgBouncerOptions{PoolMode: "transaction", DefaultPoolSize: 40})
	t.Logf("PgBouncer %s, pool_mode=%s, port %d, prepared statements %s", bouncer.Version, bouncer.PoolMode, bouncer.Port,
		map[bool]string{false: "on", true: "off"}[disablePrepare])
	params := d.PgBouncerParams + "&connect_timeout=5"
	h := conformance.Harness{
		Open:              conformance.Opener(d.Name, bouncer.DSN+params),
		Dialect:           d.dialect(bouncer.DSN + params),
		OpenRefused:       conformance.Opener(d.Name, srv.RefusedDSN()),
		OpenWrongPassword: conformance.Opener(d.Name, bouncer.DSNFor(srv.PasswordRole, "wrong-password", "postgres")+params),
		NoSessionState:    true,
	}
	if disablePrepare {
		h.Config = func(c *syncguard.Config) { c.DisablePrepare = true }
	}
	conformance.Run(t, h)
	conformance.RunAdvisory(t, h)
	if t.Failed() {
		t.Logf("--- pgbouncer log (tail) ---\n%s", bouncer.LogTail(40))
	}
}

// wrongPassword is the OpenWrongPassword hook: open, unless the server has
// no password role (a server given by SYNCGUARD_TEST_DSN), where no login
// can be made to fail and the case is skipped with that reason.
func wrongPassword(srv *pgtest.Server, open func(testing.TB) *sql.DB) func(testing.TB) *sql.DB {
	return func(t testing.TB) *sql.DB {
		t.Helper()
		if srv.PasswordRole == "" {
			t.Skipf("the server comes from %s: pgtest created no password role there, so it cannot produce a rejected login", pgtest.EnvDSN)
		}
		return open(t)
	}
}

func (d Driver) dialect(dsn string) driver.Dialect {
	if d.DialectFor != nil {
		return d.DialectFor(dsn)
	}
	return d.Dialect
}
