package chaos

import (
	"fmt"
	"testing"

	"github.com/syncguard/syncguard-go/tests/pgtest"
)

// TestChaosTxGuard is the short fault suite with the database resource
// (TxGuardEnv): every write of a holder, zombie writes included, goes
// through package txguard, and none from a lost lease may commit. `make
// chaos CHAOS_TXGUARD=1` runs the long form through TestChaos.
func TestChaosTxGuard(t *testing.T) {
	pgtest.Long(t, "the fault suite with lease-checked writes")
	t.Setenv(TxGuardEnv, "1")
	srv := pgtest.Require(t)
	// A run that happened to make no zombie write (no holder lost a lease
	// before its pause: a loaded machine's faults land differently) says
	// nothing about them: run again, up to three runs in all.
	for run := 1; ; run++ {
		rep := runReported(t, srv, Options{Duration: envDuration(t, "SYNCGUARD_CHAOS_TXGUARD_DURATION"), Logf: t.Logf}, fmt.Sprintf("chaos (txguard), run %d", run))
		if !rep.Resource.Tx {
			t.Fatal("no write went to the database resource")
		}
		if rep.Resource.ZombieAccepted != 0 {
			t.Errorf("zombie writes accepted: %d, want 0", rep.Resource.ZombieAccepted)
		}
		if rep.Resource.ZombieRejected > 0 && rep.Resource.Accepted > 0 || t.Failed() {
			return
		}
		if run == 3 {
			t.Fatalf("%d runs made %d accepted writes and %d zombie writes in the last: too few to say anything", run, rep.Resource.Accepted, rep.Resource.ZombieRejected)
		}
		t.Logf("run %d made %d accepted writes and %d zombie writes: running again", run, rep.Resource.Accepted, rep.Resource.ZombieRejected)
	}
}
