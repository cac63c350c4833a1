package syncguardtest_test

import (
	"testing"

	"github.com/syncguard/syncguard-go/conformance"
	"github.com/syncguard/syncguard-go/syncguardtest"
)

// TestMultiLockConformance runs the multilock conformance group on the
// in-memory set locker.
func TestMultiLockConformance(t *testing.T) {
	conformance.RunMultiLock(t, conformance.MultiLockHarness{New: func(t *testing.T) conformance.MultiLockTarget {
		m := syncguardtest.NewMultiLock()
		return conformance.MultiLockTarget{
			Locker: m,
			Others: []conformance.MultiLocker{m.WithIdentity("other-1"), m.WithIdentity("other-2")},
			Mutex:  syncguardtest.New(),
		}
	}})
}
