package chaos

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/syncguard/syncguard-go/tests/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m, pgtest.Options{}) }

// envDuration reads a duration from the environment (0 when unset).
func envDuration(t *testing.T, name string) time.Duration {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return 0
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, v, err)
	}
	return d
}

// TestChaos is the fault suite. By default it is the short form (20 s of
// load, every fault once: about 25 s with setup); SYNCGUARD_CHAOS_DURATION
// (e.g. 4m30s, as `make chaos` sets) selects the long form with a random
// schedule, and SYNCGUARD_CHAOS_SEED replays a run's randomness.
func TestChaos(t *testing.T) {
	pgtest.Long(t, "the fault suite")
	srv := pgtest.Require(t)
	if !srv.CanRestart() {
		t.Logf("server kind %s cannot restart: the restart fault is skipped", srv.Kind)
	}
	opts := Options{Duration: envDuration(t, "SYNCGUARD_CHAOS_DURATION"), Logf: t.Logf}
	if s := os.Getenv("SYNCGUARD_CHAOS_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("SYNCGUARD_CHAOS_SEED=%q: %v", s, err)
		}
		opts.Seed = n
	}
	rep := runReported(t, srv, opts, "chaos")
	if rep.Stats.Pairs < 20 {
		t.Errorf("the run checked only %d hand-offs; the load did not contend", rep.Stats.Pairs)
	}
	if len(rep.Violations) > 0 {
		t.Logf("replay with SYNCGUARD_CHAOS_SEED=%d (the schedule and choices repeat; timing does not)", rep.Seed)
	}
}

// runReported runs the load, logs the report under what, and fails t for
// every broken invariant.
func runReported(t *testing.T, srv *pgtest.Server, opts Options, what string) *Report {
	t.Helper()
	rep, err := Run(context.Background(), srv, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s report:\n%s", what, rep.Summary())
	for _, v := range rep.Violations {
		t.Errorf("%s", v)
	}
	return rep
}
