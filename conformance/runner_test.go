package conformance_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/syncguard/syncguard-go/conformance"
	"github.com/syncguard/syncguard-go/syncguardtest"
)

// helperEnv selects a helper test when the test binary runs itself.
const helperEnv = "SYNCGUARD_CONFORMANCE_HELPER"

// runSelf runs this test binary's tests matching pattern with helper set,
// and returns the output and whether it exited non-zero.
func runSelf(t *testing.T, pattern, helper string, env ...string) (string, bool) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run="+pattern, "-test.v", "-test.count=1")
	cmd.Env = append(append(os.Environ(), helperEnv+"="+helper), env...)
	out, err := cmd.CombinedOutput()
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		t.Fatalf("running the test binary: %v", err)
	}
	return string(out), err != nil
}

// TestHangingCaseFailsByNameWithoutCrashing runs the Lifecycle group with a
// short case timeout against a target whose setup (BackendHarness.New, part
// of the case) ignores the case's context and hangs until the watchdog has
// reported the case. Each case must fail by its name and the rule, on its
// own, and the binary must go on to run the next test. The hang is in the
// setup, not in a backend operation, and ends on the report, not after a
// fixed time: on a machine so loaded that a case's 400 ms passed before its
// first operation, an operation's hang was never reached (the operation
// failed at once on the expired context), and a watchdog run late could
// find a fixed-length hang already over. A watchdog that never reports
// lets the hang end after hangCap, and the report is missing.
func TestHangingCaseFailsByNameWithoutCrashing(t *testing.T) {
	if os.Getenv(helperEnv) != "" {
		t.Skip("helper run")
	}
	out, failed := runSelf(t, "^(TestHelperHang|TestHelperAfterHang)$", "hang")
	for _, want := range []string{
		"--- FAIL: TestHelperHang/Lifecycle/AcquireIsLockedLookupRelease",
		"rule: every case ends by its deadline (Harness.CaseTimeout 400ms × slowdown 1.0 = 400ms); Lifecycle/AcquireIsLockedLookupRelease is still running",
		"rule: every case ends by its deadline (Harness.CaseTimeout 400ms × slowdown 1.0 = 400ms); Lifecycle/AcquireIsLockedLookupRelease ran",
		"How slow the machine was: slowdown 1.0 (Harness.Slowdown; this machine measured CPU calibration",
		"--- PASS: TestHelperAfterHang",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the run's output lacks %q:\n%s", want, out)
		}
	}
	for _, bad := range []string{"panic:", "has completed"} {
		if strings.Contains(out, bad) {
			t.Errorf("the run crashed (%q in its output):\n%s", bad, out)
		}
	}
	if !failed {
		t.Errorf("the run with hanging cases exited 0:\n%s", out)
	}
}

// hangCap ends TestHelperHang's hangs when the watchdog has not reported
// them, far past the deadline + grace (600 ms) it reports them at.
const hangCap = time.Minute

func TestHelperHang(t *testing.T) {
	if os.Getenv(helperEnv) != "hang" {
		t.Skip("helper: run by TestHangingCaseFailsByNameWithoutCrashing")
	}
	conformance.RunBackend(t, conformance.BackendHarness{
		CaseTimeout: 400 * time.Millisecond,
		Slowdown:    1,
		Groups:      []string{"Lifecycle"},
		New: func(t *testing.T) conformance.Target {
			// Ignores the case's context until the case is reported as
			// still running (the watchdog fails t), or hangCap.
			for end := time.Now().Add(hangCap); !t.Failed() && time.Now().Before(end); {
				time.Sleep(10 * time.Millisecond)
			}
			return conformance.Target{Backend: syncguardtest.New()}
		},
	})
}

func TestHelperAfterHang(t *testing.T) {
	if os.Getenv(helperEnv) != "hang" {
		t.Skip("helper: run by TestHangingCaseFailsByNameWithoutCrashing")
	}
}

// TestMissingDSNUnderCIFails: in a CI job (CI=true, CI=1, or only a CI
// service's own marker such as GITHUB_ACTIONS) and with no DSN, Run fails
// with one line naming the marker; outside CI it skips; Required fails too.
func TestMissingDSNUnderCIFails(t *testing.T) {
	if os.Getenv(helperEnv) != "" {
		t.Skip("helper run")
	}
	for _, ci := range [][]string{
		{"CI=true"},
		{"CI=1"},
		{"CI=", "GITHUB_ACTIONS=true"},
		{"CI=", "JENKINS_URL=http://jenkins.example/"},
	} {
		out, failed := runSelf(t, "^TestHelperNoDSN$", "nodsn", ci...)
		want := "conformance: no database to test (Harness.DSN is empty and Harness.Open is nil) and this is a CI run (" + ci[len(ci)-1] + ")"
		if !failed || !strings.Contains(out, want) {
			t.Errorf("%v without a DSN must fail with one clear line %q; exit non-zero %v, output:\n%s", ci, want, failed, out)
		}
	}
	out, failed := runSelf(t, "^TestHelperNoDSN$", "nodsn", "CI=false") // CI=false: not CI, whatever else is set
	if failed || !strings.Contains(out, "--- SKIP: TestHelperNoDSN") {
		t.Errorf("without CI and without a DSN the run skips; exit non-zero %v, output:\n%s", failed, out)
	}
	out, failed = runSelf(t, "^TestHelperNoDSNRequired$", "nodsn", "CI=false")
	if !failed || !strings.Contains(out, "Harness.Required is set") {
		t.Errorf("Harness.Required without a DSN must fail; exit non-zero %v, output:\n%s", failed, out)
	}
}

func TestHelperNoDSN(t *testing.T) {
	if os.Getenv(helperEnv) != "nodsn" {
		t.Skip("helper: run by TestMissingDSNUnderCIFails")
	}
	conformance.Run(t, conformance.Harness{DriverName: "pgx", DSN: os.Getenv("SYNCGUARD_CONFORMANCE_DSN_THAT_IS_NOT_SET")})
	conformance.RunAdvisory(t, conformance.Harness{DriverName: "pgx"})
}

func TestHelperNoDSNRequired(t *testing.T) {
	if os.Getenv(helperEnv) != "nodsn" {
		t.Skip("helper: run by TestMissingDSNUnderCIFails")
	}
	conformance.Run(t, conformance.Harness{DriverName: "pgx", Required: true})
}

// TestSlowdownStretchesTheDeadline: a case that needs 400 ms (its first
// operation waits that long, honouring its context) fails against a
// 200 ms CaseTimeout on a machine declared as fast as the reference
// (SYNCGUARD_CONFORMANCE_SLOWDOWN=1), saying how slow the machine was, and
// passes when the variable declares it 100 times slower (a 20 s budget for
// 400 ms: only a deadline that does not stretch fails it, not a loaded
// machine); a malformed value fails the run with one line.
func TestSlowdownStretchesTheDeadline(t *testing.T) {
	if os.Getenv(helperEnv) != "" {
		t.Skip("helper run")
	}
	out, failed := runSelf(t, "^TestHelperSlowCase$", "slow", conformance.SlowdownEnv+"=1")
	for _, want := range []string{
		"rule: every case ends by its deadline (Harness.CaseTimeout 200ms × slowdown 1.0 = 200ms); Lifecycle/AcquireIsLockedLookupRelease ran",
		"How slow the machine was: slowdown 1.0 (" + conformance.SlowdownEnv + "=1; this machine measured CPU calibration",
	} {
		if !failed || !strings.Contains(out, want) {
			t.Errorf("the slow case against a 200 ms budget must fail saying %q; exit non-zero %v, output:\n%s", want, failed, out)
		}
	}
	if !strings.Contains(out, "set "+conformance.SlowdownEnv+" (or Harness.Slowdown) higher") && !strings.Contains(out, "set "+conformance.SlowdownEnv+" higher, or unset it") {
		t.Errorf("the failure says which knob gives the case more time:\n%s", out)
	}
	out, failed = runSelf(t, "^TestHelperSlowCase$", "slow", conformance.SlowdownEnv+"=100")
	if failed || !strings.Contains(out, "conformance: slowdown 100.0 ("+conformance.SlowdownEnv+"=100;") {
		t.Errorf("with %s=100 the budget is 20 s and the slow case passes; exit non-zero %v, output:\n%s", conformance.SlowdownEnv, failed, out)
	}
	out, failed = runSelf(t, "^TestHelperSlowCase$", "slow", conformance.SlowdownEnv+"=fast")
	if !failed || !strings.Contains(out, conformance.SlowdownEnv+`="fast": want a factor ≥ 1`) {
		t.Errorf("a malformed %s fails the run with one line; exit non-zero %v, output:\n%s", conformance.SlowdownEnv, failed, out)
	}
}

func TestHelperSlowCase(t *testing.T) {
	if os.Getenv(helperEnv) != "slow" {
		t.Skip("helper: run by TestSlowdownStretchesTheDeadline")
	}
	conformance.RunBackend(t, conformance.BackendHarness{
		CaseTimeout: 200 * time.Millisecond,
		Groups:      []string{"Lifecycle"},
		New: func(t *testing.T) conformance.Target {
			if !strings.HasSuffix(t.Name(), "/AcquireIsLockedLookupRelease") {
				t.Skip("one case is enough")
			}
			b := syncguardtest.New()
			var once sync.Once
			b.SetHook(func(ctx context.Context, _ syncguardtest.Call) error {
				var err error
				once.Do(func() {
					select {
					case <-time.After(400 * time.Millisecond):
					case <-ctx.Done():
						err = syncguardtest.Err(syncguardtest.OpAcquire, "NetworkTimeout")
					}
				})
				return err
			})
			return conformance.Target{Backend: b}
		},
	})
}
