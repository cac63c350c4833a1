package conformance

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/syncguard/syncguard-go/driver"
	"github.com/syncguard/syncguard-go/syncguard"
)

// Harness describes the PostgreSQL database under test, for Run and
// RunAdvisory.
type Harness struct {
	// DSN and DriverName say how to open the database under test: Open
	// defaults to Opener(DriverName, DSN). Pass the DSN straight from the
	// environment: when it is empty (and Open is nil) the run is skipped,
	// or, when Required or the environment marks a CI job (see InCI:
	// CI=true, CI=1, GITHUB_ACTIONS, GITLAB_CI, JENKINS_URL, ...), it fails
	// with one line saying so, so that a CI job cannot pass having tested
	// nothing.
	DSN        string
	DriverName string

	// Open returns a new, independent *sql.DB (its own pool) for the
	// database under test, and arranges for it to be closed (t.Cleanup).
	// The suite calls it more than once to get several pools. Default:
	// Opener(DriverName, DSN).
	Open func(t testing.TB) *sql.DB

	// Required makes a missing database (empty DSN, nil Open) a failure
	// instead of a skip. It is implied in a CI job (InCI).
	Required bool

	// Dialect is passed to syncguard.Config. Nil: found from the driver
	// registration (import the adapter package in the test).
	Dialect driver.Dialect

	// OpenOther opens a pool on the same database through a different
	// driver (for example pgx when Open uses lib/pq). Enables the
	// cross-driver cases. OtherDialect goes with it (nil: registered).
	OpenOther    func(t testing.TB) *sql.DB
	OtherDialect driver.Dialect

	// OpenRefused opens a pool whose connections are refused (nothing
	// listens at its address). Enables the refused-connection case.
	OpenRefused func(t testing.TB) *sql.DB

	// OpenWrongPassword opens a pool to the server with a role whose
	// password is wrong. Enables the authentication case.
	OpenWrongPassword func(t testing.TB) *sql.DB

	// Restart restarts the server (immediate mode is best: a crash) and
	// returns once it accepts connections again. Enables the restart cases.
	Restart func(ctx context.Context) error

	// Config, when set, adjusts the syncguard.Config of every Backend the
	// suite creates, after the case's table names and Dialect are filled
	// in: for example DisablePrepare behind a pooler in transaction mode.
	Config func(*syncguard.Config)

	// NoSessionState says that a connection keeps no session state from
	// one transaction to the next (a pooler in transaction mode, such as
	// PgBouncer with pool_mode=transaction). Cases that need session state
	// (session-level advisory locks, SET, named prepared statements) are
	// then skipped with a message.
	NoSessionState bool

	// CaseTimeout bounds every case on the reference machine (2 quiet
	// cores, a local server): a case's deadline is CaseTimeout × the
	// slowdown (see Slowdown). Default 30 s.
	CaseTimeout time.Duration

	// Slowdown says how much slower than the suite's reference machine
	// this one and its server are (a factor ≥ 1). Case deadlines and the
	// suite's own waits stretch by it, and the cases that repeat a race
	// many times (Races, MutualExclusion, ...) repeat it fewer times, down
	// to a floor that still catches a real bug. 0 (the default): the
	// factor SYNCGUARD_CONFORMANCE_SLOWDOWN (SlowdownEnv) gives, or
	// without it the one the suite measures at the start of the run (round
	// trips to the server, and a CPU calibration loop, against the
	// reference's figures; at most 8, and deadlines at least ×2 in a CI
	// job), measuring again when a case reaches its deadline. A case that
	// runs out of time says how slow the machine measured.
	Slowdown float64

	// Serial disables t.Parallel between cases (for a server with few
	// connections). Default false.
	Serial bool

	// Groups limits the run to these case groups (the middle element of
	// the subtest name, such as "Fences" or "CrossDriver"). Default: all.
	Groups []string
}

// BackendHarness describes any syncguard.LockBackend under test, for
// RunBackend: an in-memory fake, a wrapper, another storage.
type BackendHarness struct {
	// New returns the Target of one case: a fresh backend (no lock on any
	// key the case uses) and its hooks. Called once per case, on the
	// case's test goroutine. Required.
	New func(t *testing.T) Target

	// CaseTimeout bounds every case on the reference machine. Default
	// 30 s. See Harness.CaseTimeout.
	CaseTimeout time.Duration

	// Slowdown: see Harness.Slowdown (without a server, the suite
	// measures only the CPU).
	Slowdown float64

	// Serial disables t.Parallel between cases. Default false.
	Serial bool

	// Groups limits the run to these case groups. Default: all.
	Groups []string
}

// Target is one backend under test and the hooks that let the
// backend-level cases observe and steer it. Only Backend is required; a
// case that needs a missing hook is skipped with a message naming it.
type Target struct {
	// Backend is the backend under test.
	Backend syncguard.LockBackend

	// Others are more views of the same locks: other pools, other
	// processes, other clients. Cases spread their work over Backend and
	// Others. Default: none (Backend plays every part).
	Others []syncguard.LockBackend

	// Now reads the clock that decides expiry (for PostgreSQL, the
	// server's). Default: time.Now.
	Now func(ctx context.Context) (time.Time, error)

	// WaitPast returns once that clock has passed t (or ctx ends). Default:
	// sleep, reading Now, until it has. A backend with a controllable
	// clock advances it instead.
	WaitPast func(ctx context.Context, t time.Time) error

	// Unreachable is the same backend (same configuration) with every I/O
	// failing, for example on a closed *sql.DB: the validation cases check
	// that bad input is rejected before any I/O on it.
	Unreachable syncguard.LockBackend

	// Count returns how many lock records the backend stores, live or
	// expired: release must delete its record.
	Count func(ctx context.Context) (int, error)

	// SetFence makes the fence counter of key n, so that the next acquire
	// gets fence n+1: the overflow cases.
	SetFence func(ctx context.Context, key string, n int64) error

	// Delete removes the lock record of lockID, as an operator's DELETE
	// would; Expire moves its expiry an hour into the past. The lock-loss
	// cases of the lease.
	Delete func(ctx context.Context, lockID string) error
	Expire func(ctx context.Context, lockID string) error

	// Capabilities, when set, is what Backend.Capabilities must return.
	// Default: any value with SupportsFencing and a Backend name.
	Capabilities *syncguard.Capabilities
}

// Run runs every case of both tiers against the database h describes:
// the backend tier (subtests Backend/Group/Rule: the properties of any
// LockBackend, against a *syncguard.Backend on the case's own tables) and
// the SQL tier (subtests SQL/Group/Rule: transactions, drivers, poolers,
// restarts, compatibility with the reference layout). Call it from a Test
// function. The advisory-lock cases have their own entry point,
// RunAdvisory.
func Run(t *testing.T, h Harness) {
	t.Helper()
	bg, _ := backendCases.groups()
	sg, _ := sqlCases.groups()
	h, ok := h.ready(t, bg, sg)
	if !ok {
		return
	}
	o := h.options(t)
	t.Run("Backend", func(t *testing.T) {
		runCases(t, &backendCases, o, func(t *testing.T, ctx context.Context) *env {
			s := newSQLEnv(t, ctx, h)
			return s.env
		})
	})
	t.Run("SQL", func(t *testing.T) {
		runCases(t, &sqlCases, o, func(t *testing.T, ctx context.Context) *sqlEnv {
			return newSQLEnv(t, ctx, h)
		})
	})
}

// RunBackend runs the backend tier against the backend h.New makes:
// mutual exclusion, fences, expiry by the backend's clock, lookups and
// sanitization, ownership, validation before I/O, contexts, and the
// helpers (WithLock, Lock, Lease) on top of it. Subtests are Group/Rule.
func RunBackend(t *testing.T, h BackendHarness) {
	t.Helper()
	if h.New == nil {
		t.Fatal("conformance: BackendHarness.New is required")
	}
	bg, _ := backendCases.groups()
	checkGroups(t, h.Groups, bg)
	if t.Failed() {
		return
	}
	o := runOptions{timeout: h.CaseTimeout, serial: h.Serial, groups: h.Groups}
	if o.timeout <= 0 {
		o.timeout = defaultCaseTimeout
	}
	o.pace = newPace(t, h.Slowdown, nil)
	t.Logf("conformance: %s", o.pace)
	runCases(t, &backendCases, o, func(t *testing.T, ctx context.Context) *env {
		tg := h.New(t)
		if tg.Backend == nil {
			t.Fatal("setup: BackendHarness.New returned a Target without a Backend")
		}
		return newEnv(t, ctx, tg)
	})
}

// RunAdvisory runs the cases of package advisory (transaction and session
// advisory locks, their monitoring, cancellation and ids) against the
// database h describes, as subtests Advisory/Rule. The preflight and the
// DSN rules of Run apply.
func RunAdvisory(t *testing.T, h Harness) {
	t.Helper()
	ag, _ := advisoryCases.groups()
	h, ok := h.ready(t, ag)
	if !ok {
		return
	}
	runCases(t, &advisoryCases, h.options(t), func(t *testing.T, ctx context.Context) *sqlEnv {
		return newSQLEnv(t, ctx, h)
	})
}

const defaultCaseTimeout = 30 * time.Second

// ready prepares a run of the case groups given: it resolves h, checks
// that h.Groups names only groups among them, and runs the preflight.
// False: t was skipped or failed.
func (h Harness) ready(t *testing.T, groups ...[]string) (Harness, bool) {
	t.Helper()
	h, ok := h.resolve(t)
	if !ok {
		return h, false
	}
	checkGroups(t, h.Groups, groups...)
	if t.Failed() {
		return h, false
	}
	preflight(t, h)
	return h, true
}

// options are the run's options, with its pace: measured on a pool of its
// own, kept for measuring again during the run.
func (h Harness) options(t *testing.T) runOptions {
	t.Helper()
	p := newPace(t, h.Slowdown, h.Open(t))
	t.Logf("conformance: %s", p)
	return runOptions{timeout: h.CaseTimeout, pace: p, serial: h.Serial, groups: h.Groups}
}

// resolve fills the defaults of h. Without a database it skips t, or fails
// it with one line when a database is required, and returns false.
func (h Harness) resolve(t *testing.T) (Harness, bool) {
	t.Helper()
	if h.CaseTimeout <= 0 {
		h.CaseTimeout = defaultCaseTimeout
	}
	if h.Open != nil {
		return h, true
	}
	if h.DSN == "" {
		why := "Harness.DSN is empty and Harness.Open is nil"
		if h.Required {
			t.Fatalf("conformance: no database to test (%s) and Harness.Required is set: set the DSN for this run", why)
		}
		if marker, ok := InCI(); ok {
			t.Fatalf("conformance: no database to test (%s) and this is a CI run (%s): set the DSN in this CI job, or the suite would pass having run nothing", why, marker)
		}
		t.Skipf("conformance: no database to test (%s); set the DSN to run the suite", why)
		return h, false
	}
	if h.DriverName == "" {
		t.Fatal(`conformance: Harness.DSN is set but Harness.DriverName is empty (want the database/sql driver name, such as "pgx" or "postgres")`)
		return h, false
	}
	h.Open = Opener(h.DriverName, h.DSN)
	return h, true
}

// Opener returns a Harness.Open (or OpenOther, OpenRefused, ...) function
// that opens a pool with sql.Open(driverName, dsn), allows it up to 20 open
// connections and closes it when the test ends:
//
//	conformance.Run(t, conformance.Harness{Open: conformance.Opener("pgx", dsn)})
func Opener(driverName, dsn string) func(t testing.TB) *sql.DB {
	return func(t testing.TB) *sql.DB {
		t.Helper()
		db, err := sql.Open(driverName, dsn)
		if err != nil {
			t.Fatalf("setup: sql.Open(%q): %v", driverName, err)
		}
		db.SetMaxOpenConns(20)
		t.Cleanup(func() { db.Close() })
		return db
	}
}
