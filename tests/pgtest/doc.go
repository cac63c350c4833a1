// Package pgtest gives syncguard-go's integration tests a PostgreSQL server.
//
// It is a separate Go module so that its test-only dependency
// (github.com/ory/dockertest/v3 and what it pulls in) is never built into the
// library's packages: no published module requires it. The test-only
// modules (tests/itest, tests/chaos, tests/clitest, tests/ha,
// bench) require it like any sibling, and the repository's go.work builds
// it from this checkout (see docs/release.md). Beside the servers it holds
// the test machinery those modules share: package history (the lock
// history checker of the chaos and failover runs), pginstall (where the
// server programs are and whom they run as), suite and tcpproxy.
//
// # Lookup order
//
// [Start] tries, in order:
//
//  1. env: SYNCGUARD_TEST_DSN, when set, is used as is (Kind "env"). Nothing
//     is created or stopped; PasswordRole is empty.
//  2. local: a throwaway cluster built from installed server binaries
//     (Kind "local"). The binaries are looked for in $SYNCGUARD_PG_BINDIR,
//     then next to pg_ctl on PATH, then `pg_config --bindir`, then
//     /usr/lib/postgresql/*/bin (newest first), /usr/pgsql-*/bin and
//     /usr/local/pgsql/bin. initdb and the server run in a fresh directory
//     under os.TempDir() named syncguard-pgtest-*, listen on a free TCP port
//     of 127.0.0.1 and put their unix sockets in that directory. When the
//     process runs as root, they run as the `postgres` OS user. A port lost
//     to a concurrent process is retried with a new port.
//  3. docker: a postgres:15 container through dockertest (Kind "docker"),
//     only when a Docker engine answers a ping within a few seconds.
//
// When all fail, Start returns an error wrapping [ErrNoDatabase] and the
// reason each way failed.
//
// # Cluster setup (local and docker kinds)
//
// Over the unix socket every role is trusted; over TCP only the superuser
// `postgres` is (from 127.0.0.1, or any address for the docker kind), and
// every other role must use scram-sha-256. The role named by Server.PasswordRole is created with
// Server.Password for tests of password authentication. fsync is off unless
// Options.Fsync is set; synchronous_commit stays on, so [Server.Restart]
// (an immediate-mode, crash-like restart) keeps acknowledged commits.
//
// The few SQL setup steps run the `psql` client as a subprocess; readiness
// is checked with `pg_isready` when installed, else by dialing the port.
//
// # Use from tests
//
//	func TestMain(m *testing.M) { pgtest.Main(m, pgtest.Options{}) }
//
//	func TestSomething(t *testing.T) {
//		srv := pgtest.Require(t) // skips (or fails in CI) without a database
//		dsn, err := srv.CreateDatabase(context.Background(), "something")
//		...
//	}
//
// In a CI job (InCI: CI=true, CI=1, GITHUB_ACTIONS, ...) a missing database
// is an error, never a skip.
package pgtest
