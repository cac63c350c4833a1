package syncguard_test

import (
	"testing"

	"github.com/syncguard/syncguard-go/internal/kit"
	"github.com/syncguard/syncguard-go/multilock"
	"github.com/syncguard/syncguard-go/rwlock"
	"github.com/syncguard/syncguard-go/semaphore"
	"github.com/syncguard/syncguard-go/syncguard"
	"github.com/syncguard/syncguard-go/syncguardtest"
)

// TestKindsHaveQueues: the Backend, the lock kinds and the fakes are
// queues to Lock and WithLock. Their Queue methods return kit.Wait, an
// alias of the same interface type literal as package syncguard's waiter:
// were the two to drift apart, Lock would poll them, silently.
func TestKindsHaveQueues(t *testing.T) {
	for name, l := range map[string]kit.Queuer{
		"Backend":                 (*syncguard.Backend)(nil),
		"semaphore":               (*semaphore.Semaphore)(nil),
		"rwlock":                  (*rwlock.Locker)(nil),
		"multilock":               (*multilock.Locker)(nil),
		"syncguardtest.Backend":   syncguardtest.New(),
		"syncguardtest.Semaphore": (*syncguardtest.Semaphore)(nil),
		"syncguardtest.RWSide":    (*syncguardtest.RWSide)(nil),
		"syncguardtest.MultiLock": (*syncguardtest.MultiLock)(nil),
	} {
		if !syncguard.HasQueue(l) {
			t.Errorf("%s (%T) is a kit.Queuer but Lock would poll it", name, l)
		}
	}
}
