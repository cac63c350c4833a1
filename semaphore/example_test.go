package semaphore_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"sync"
	"time"

	"github.com/syncguard/syncguard-go/semaphore"
	"github.com/syncguard/syncguard-go/syncguard"
	"github.com/syncguard/syncguard-go/syncguardtest"
)

// At most three exports run at once; each holds a permit (a lease) with
// its own slot and fence.
func ExampleSemaphore_Lock() {
	var db *sql.DB // opened with a registered driver; see syncguard's package doc
	ctx := context.Background()
	if err := semaphore.SetupSchema(ctx, db, nil); err != nil {
		log.Fatal(err)
	}
	exports, err := semaphore.New(db, nil, 3)
	if err != nil {
		log.Fatal(err)
	}
	defer exports.Close()
	p, err := exports.Lock(ctx, "exports", &syncguard.LockOptions{TTL: 30 * time.Second, AutoExtend: true})
	if err != nil {
		log.Fatal(err) // errors.Is(err, semaphore.ErrPermitsMismatch): "exports" has another number of permits
	}
	defer p.Close()
	fmt.Println("slot", p.Slot, "fence", p.Fence(), "for", p.FenceKey())
}

// store is a resource that checks fences: it keeps the highest fence it
// accepted per fence counter (semaphore.FenceKey: the key and the slot)
// and rejects a write that carries a lower one.
type store struct {
	mu   sync.Mutex
	last map[string]int64
}

func (s *store) write(fenceKey string, fence syncguard.Fence, what string) error {
	n, err := fence.Int64()
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if n < s.last[fenceKey] {
		return fmt.Errorf("rejected %s: fence %d < %d on %s", what, n, s.last[fenceKey], fenceKey)
	}
	s.last[fenceKey] = n
	return nil
}

// Fencing a write with a permit: a holder that paused past its TTL
// writes with its old fence after the slot passed to the next holder,
// and the resource rejects it. (On the in-memory semaphore of
// syncguardtest, which follows the PostgreSQL one's rules; the
// conformance group checks both.)
func ExampleFenceKey() {
	ctx := context.Background()
	sem := syncguardtest.NewSemaphore(1)
	res := &store{last: map[string]int64{}}

	old, _ := syncguard.Lock(ctx, sem, "reports", &syncguard.LockOptions{TTL: time.Second})
	slot, _ := sem.Slot(old.LockID())
	fmt.Println(res.write(semaphore.FenceKey("reports", slot), old.Fence(), "the first holder's write"))

	sem.Advance(3 * time.Second) // the first holder pauses: its permit expires
	next, _ := syncguard.Lock(ctx, sem, "reports", nil)
	slot2, _ := sem.Slot(next.LockID())
	fmt.Println(res.write(semaphore.FenceKey("reports", slot2), next.Fence(), "the next holder's write"))
	fmt.Println(res.write(semaphore.FenceKey("reports", slot), old.Fence(), "the paused holder's write"))
	next.Close()
	// Output:
	// <nil>
	// <nil>
	// rejected the paused holder's write: fence 1 < 2 on reports#1
}
