package conformance_test

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/syncguard/syncguard-go/conformance"
	"github.com/syncguard/syncguard-go/syncguardtest"
)

// TestSemaphoreFewerThanNFailsNHoldersAtOnce runs the NHoldersAtOnce
// case against a semaphore that admits one holder fewer than it is asked
// for (the in-memory semaphore with N-1 permits behind every open of N):
// the case must fail by its rule.
func TestSemaphoreFewerThanNFailsNHoldersAtOnce(t *testing.T) {
	if os.Getenv(helperEnv) != "" {
		t.Skip("helper run")
	}
	out, failed := runSelf(t, "^TestHelperSemaphoreFewer$/^NHoldersAtOnce$", "fewer")
	if want := "rule: a semaphore of 4 admits 4 holders at once (a fresh key): only 3 held a permit"; !strings.Contains(out, want) {
		t.Errorf("the run's output lacks %q:\n%s", want, out)
	}
	if !failed {
		t.Errorf("the run against a semaphore of N-1 exited 0:\n%s", out)
	}
}

func TestHelperSemaphoreFewer(t *testing.T) {
	if os.Getenv(helperEnv) != "fewer" {
		t.Skip("helper of TestSemaphoreFewerThanNFailsNHoldersAtOnce")
	}
	conformance.RunSemaphore(t, conformance.SemaphoreHarness{CaseTimeout: 2 * time.Second, New: func(testing.TB) func(int) conformance.SemaphoreTarget {
		var store *syncguardtest.Semaphore
		return func(permits int) conformance.SemaphoreTarget {
			if store == nil {
				store = syncguardtest.NewSemaphore(max(permits-1, 1))
				return store
			}
			return store.Process(max(permits-1, 1))
		}
	}})
}
