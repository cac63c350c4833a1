package rwlock_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"sync"

	"github.com/syncguard/syncguard-go/rwlock"
	"github.com/syncguard/syncguard-go/syncguard"
	"github.com/syncguard/syncguard-go/syncguardtest"
)

// resource is a fenced store: it keeps the fence of the writer that wrote
// last and rejects a write with a smaller fence (a deposed writer's).
type resource struct {
	mu    sync.Mutex
	value string
	fence syncguard.Fence
}

func (r *resource) write(f syncguard.Fence, v string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if f < r.fence { // fences are fixed-width digits: string order is numeric order
		return fmt.Errorf("stale writer fence %s < %s", f, r.fence)
	}
	r.value, r.fence = v, f
	return nil
}

func (r *resource) read() (string, syncguard.Fence) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.value, r.fence
}

// The fence recipe: a writer stores its lease's fence with what it
// writes, and the resource rejects a smaller one; a reader's lease carries
// the writer generation (the latest writer fence at its admission): if
// the resource's fence, or WriterFence, is greater by the time the reader
// uses what it read, a writer came in between and the read is stale. It
// runs here on syncguardtest's fake, which has the rules of package
// rwlock; on PostgreSQL use rwlock.New(db, cfg).Shared() and .Exclusive()
// (and rw.WriterFence) the same way.
func Example_fences() {
	ctx := context.Background()
	rw := syncguardtest.NewRWLock()
	var res resource

	w1, _ := syncguard.Lock(ctx, rw.Exclusive(), "config", nil)
	fmt.Println("writer 1:", res.write(w1.Fence(), "v1"))
	w1.Close()

	r, _ := syncguard.Lock(ctx, rw.Shared(), "config", nil)
	v, _ := res.read()
	gen := r.Fence() // the writer generation of the read
	r.Close()        // done reading; later, before using v:

	w2, _ := syncguard.Lock(ctx, rw.Exclusive(), "config", nil)
	fmt.Println("writer 2:", res.write(w2.Fence(), "v2"))
	w2.Close()

	fmt.Println("deposed writer 1:", res.write(w1.Fence(), "late") != nil)
	latest, _ := rw.WriterFence(ctx, "config")
	fmt.Printf("reader read %q; a writer came in between: %v\n", v, latest > gen)
	// Output:
	// writer 1: <nil>
	// writer 2: <nil>
	// deposed writer 1: true
	// reader read "v1"; a writer came in between: true
}

// Shared and exclusive leases on PostgreSQL: both sides are
// syncguard.LockBackends and Queuers, so syncguard.Lock and WithLock give
// readers and writers leases with a TTL, AutoExtend and the loss signal.
func ExampleNew() {
	var db *sql.DB // opened with a registered driver; see syncguard's package doc
	ctx := context.Background()
	if err := rwlock.SetupSchema(ctx, db, nil); err != nil {
		log.Fatal(err)
	}
	rw, err := rwlock.New(db, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer rw.Close()
	err = syncguard.WithLock(ctx, rw.Shared(), "report:2024", func(ctx context.Context, lease *syncguard.Lease) error {
		// read; lease.Fence() is the writer generation of the read
		return nil
	}, &syncguard.LockOptions{AutoExtend: true})
	if err != nil {
		log.Fatal(err)
	}
}
