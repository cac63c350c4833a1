// Package conformance is the executable form of the SyncGuard contract:
// every behaviour a user relies on, checked as one named subtest per rule,
// in the manner of testing/slogtest.Run and golang.org/x/net/nettest.TestConn.
//
// It has three entry points:
//
//   - RunBackend runs the backend tier against any syncguard.LockBackend
//     (an in-memory fake such as package syncguardtest, a wrapper, another
//     storage): mutual exclusion, fences, expiry by the backend's clock,
//     lookups and sanitization, ownership, validation before I/O, contexts,
//     and the helpers WithLock, Lock and Lease on top of the backend.
//   - Run runs the backend tier against a *syncguard.Backend on a real
//     PostgreSQL, then the SQL tier: transactions (Backend.WithTx),
//     drivers, poolers, server restarts, and compatibility with the
//     reference implementation's tables.
//   - RunAdvisory runs the cases of package advisory.
//
// Run it from a test in your own CI, against your database, driver and
// pooler:
//
//	func TestSyncGuardConformance(t *testing.T) {
//		conformance.Run(t, conformance.Harness{
//			DriverName: "pgx",
//			DSN:        os.Getenv("SYNCGUARD_CONFORMANCE_DSN"),
//		})
//	}
//
// Without a DSN the run is skipped, except in a CI job (see InCI: CI=true,
// CI=1, or a CI service's marker such as GITHUB_ACTIONS, GITLAB_CI,
// BUILDKITE, JENKINS_URL or TF_BUILD) or when Harness.Required is set: then
// it fails with one line, so a CI job cannot go green having tested nothing. Before the cases, a
// preflight connects once, checks that the role may create tables in its
// current schema (failing once with the GRANT that fixes it), and drops
// tables that crashed runs left behind (the suite's sgc_* tables older than
// an hour).
//
// Each case runs on its own test goroutine with a deadline
// (Harness.CaseTimeout × the machine's slowdown): every wait and lock
// operation of a case honours it, so a case that would hang fails by its
// name instead, saying how slow the machine measured. The slowdown is
// measured at the start of the run (round trips, a CPU calibration loop)
// or given (SYNCGUARD_CONFORMANCE_SLOWDOWN, Harness.Slowdown); the suite's
// own waits stretch by it and its heaviest races repeat fewer times, so a
// busy CI runner is not reported as a bug. A failure message
// states the broken rule in one line ("rule: ..."), then the evidence; a
// message starting "setup:" means the case could not set itself up. Cases
// create their own uniquely named tables and drop them at the end, so the
// suite runs in parallel and leaves nothing behind.
//
// Cases that need more than a database (a server restart, a refused
// connection, a second driver) use optional Harness hooks and are skipped,
// with a message naming the hook, when it is missing; backend-tier cases
// that need a Target hook are skipped the same way.
package conformance
