package election_test

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/syncguard/syncguard-go/election"
	"github.com/syncguard/syncguard-go/syncguard"
	"github.com/syncguard/syncguard-go/syncguardtest"
)

// reports stands for the resource the leader writes: it keeps the highest
// term that wrote, and refuses a write of a lower one (a deposed leader's
// late write). With PostgreSQL this is one UPDATE ... WHERE fence IS NULL
// OR fence < $1 (fences are 15-digit strings: they compare as text).
type reports struct {
	mu   sync.Mutex
	term syncguard.Fence
	body string
}

var errStale = errors.New("stale term: a newer leader wrote")

func (r *reports) write(term syncguard.Fence, body string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if term < r.term {
		return errStale
	}
	r.term, r.body = term, body
	return nil
}

// The leader's work runs with its term's context, and fences every write
// with its term. Run campaigns again after a loss, and resigns when its
// context ends.
func ExampleElection_Run() {
	fake := syncguardtest.New() // syncguard.New(db, nil) in production
	store := &reports{}
	e, _ := election.New(fake, "leader:reports", &election.Options{Identity: "worker-1"})
	ctx, stop := context.WithCancel(context.Background())
	err := e.Run(ctx, func(ctx context.Context, term *election.Term) error {
		fmt.Println("elected, term", term.Fence())
		if err := store.write(term.Fence(), "daily totals"); err != nil {
			return err
		}
		// A deposed leader's write, with an older term, is refused.
		fmt.Println(store.write("000000000000000", "late write"))
		stop() // shutdown: Run resigns and returns
		<-ctx.Done()
		return nil
	})
	fmt.Println(err, store.body)
	l, _ := e.Leader(context.Background())
	fmt.Println("leader after shutdown:", l)
	// Output:
	// elected, term 000000000000001
	// stale term: a newer leader wrote
	// <nil> daily totals
	// leader after shutdown: <nil>
}

// Leader tells who leads without campaigning; Resign hands over at once.
func ExampleTerm_Resign() {
	ctx := context.Background()
	fake := syncguardtest.New()
	a, _ := election.New(fake, "leader:jobs", &election.Options{Identity: "host-a:17"})
	b, _ := election.New(fake, "leader:jobs", &election.Options{Identity: "host-b:23"})
	term, _ := a.Campaign(ctx)
	l, _ := b.Leader(ctx)
	fmt.Println(l.Identity, l.Term)
	_ = term.Resign(ctx)
	fmt.Println(context.Cause(term.Context()))
	next, _ := b.Campaign(ctx)
	l, _ = a.Leader(ctx)
	fmt.Println(l.Identity, l.Term)
	_ = next.Resign(ctx)
	// Output:
	// host-a:17 000000000000001
	// election: resigned
	// host-b:23 000000000000002
}
