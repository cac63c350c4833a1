package syncguardtest_test

import (
	"testing"

	"github.com/syncguard/syncguard-go/conformance"
	"github.com/syncguard/syncguard-go/syncguardtest"
)

// TestRWLockConformance runs the read-write lock group on the fake.
func TestRWLockConformance(t *testing.T) {
	conformance.RunRWLock(t, conformance.RWLockHarness{Parallel: true, New: func(t *testing.T) conformance.RWLockTarget {
		rw := syncguardtest.NewRWLock()
		return conformance.RWLockTarget{Shared: rw.Shared(), Exclusive: rw.Exclusive(), WriterFence: rw.WriterFence}
	}})
}
