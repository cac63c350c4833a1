package syncguardtest_test

import (
	"testing"

	"github.com/syncguard/syncguard-go/conformance"
	"github.com/syncguard/syncguard-go/syncguardtest"
)

// TestSemaphoreConformance runs the semaphore group on the in-memory
// semaphore: each case a store of its own, each open another process.
func TestSemaphoreConformance(t *testing.T) {
	conformance.RunSemaphore(t, conformance.SemaphoreHarness{New: func(testing.TB) func(int) conformance.SemaphoreTarget {
		var store *syncguardtest.Semaphore
		return func(permits int) conformance.SemaphoreTarget {
			if store == nil {
				store = syncguardtest.NewSemaphore(permits)
				return store
			}
			return store.Process(permits)
		}
	}})
}
