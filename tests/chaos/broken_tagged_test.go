//go:build syncguard_broken

package chaos

import (
	"context"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/syncguard/syncguard-go/tests/pgtest"
)

// TestBrokenBuildRejected runs in the broken build only (see
// TestCheckerRejectsBrokenBuild): 8 s of contended load without faults,
// whose history the checker must find not linearizable.
func TestBrokenBuildRejected(t *testing.T) {
	srv := pgtest.Require(t)
	rep, err := Run(context.Background(), srv, Options{Duration: 8 * time.Second, Schedule: []Fault{}, Keys: 3, LinearDir: t.TempDir(), Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Linear == nil || rep.Linear.Verdict != porcupine.Illegal {
		t.Fatalf("the checker accepted the broken build's history: %v", rep.Linear.Line())
	}
	t.Logf("rejected, as it must be: %s (the rule checks found %d violations)", rep.Linear.Line(), len(rep.Violations)-len(rep.Linear.Illegal))
}
