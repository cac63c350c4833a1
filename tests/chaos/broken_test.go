package chaos

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/syncguard/syncguard-go/tests/pgtest"
)

// TestCheckerRejectsBrokenBuild is the proof that the linearizability
// checker can fail on a real run: it builds this package with the tag
// syncguard_broken (the library then takes over locks 500 ms before they
// expire: internal/rules/live_broken.go) and runs TestBrokenBuildRejected,
// a short fault-free load whose history the checker must reject.
func TestCheckerRejectsBrokenBuild(t *testing.T) {
	pgtest.Long(t, "the broken-build run of the linearizability checker")
	srv := pgtest.Require(t)
	cmd := exec.Command("go", "test", "-tags", "syncguard_broken", "-count=1", "-run", "^TestBrokenBuildRejected$", "-v", ".")
	cmd.Env = append(os.Environ(), "SYNCGUARD_LONG=1", pgtest.EnvDSN+"="+srv.DSN)
	out, err := cmd.CombinedOutput()
	t.Logf("%s", out)
	if err != nil {
		t.Fatalf("the broken build's run: %v", err)
	}
	if !strings.Contains(string(out), "--- PASS: TestBrokenBuildRejected") {
		t.Fatal("TestBrokenBuildRejected did not run")
	}
}
