package multilock_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"time"

	"github.com/syncguard/syncguard-go/multilock"
	"github.com/syncguard/syncguard-go/syncguard"
	"github.com/syncguard/syncguard-go/syncguardtest"
)

// ledger is a resource that fences each account on its own: it keeps
// the largest fence it accepted per account and rejects a write carrying
// a smaller one (a holder that lost its set while paused).
type ledger struct {
	balance map[string]int
	fence   map[string]syncguard.Fence
}

func (l *ledger) write(account string, f syncguard.Fence, delta int) error {
	if f < l.fence[account] {
		return fmt.Errorf("stale fence %s for %s (seen %s)", f, account, l.fence[account])
	}
	l.fence[account] = f
	l.balance[account] += delta
	return nil
}

// A transfer locks both accounts at once, in whatever order the caller
// names them, and writes each with its own key's fence. Here on the
// in-memory fake; on PostgreSQL, pass a *multilock.Locker instead.
func Example() {
	ctx := context.Background()
	locks := syncguardtest.NewMultiLock()
	res := &ledger{balance: map[string]int{}, fence: map[string]syncguard.Fence{}}
	transfer := func(from, to string, amount int) error {
		return multilock.WithLock(ctx, locks, []string{from, to}, func(ctx context.Context, lease *multilock.Lease) error {
			ff, _ := lease.FenceOf(from)
			tf, _ := lease.FenceOf(to)
			if err := res.write(from, ff, -amount); err != nil {
				return err
			}
			return res.write(to, tf, amount)
		}, nil)
	}
	fmt.Println(transfer("acct:alice", "acct:bob", 10))
	fmt.Println(transfer("acct:bob", "acct:alice", 3))
	fmt.Println(res.balance["acct:alice"], res.balance["acct:bob"], res.fence["acct:alice"], res.fence["acct:bob"])

	// A writer still holding the first transfer's fences is rejected.
	fmt.Println(res.write("acct:bob", "000000000000001", 1000))
	// Output:
	// <nil>
	// <nil>
	// -7 7 000000000000002 000000000000002
	// stale fence 000000000000001 for acct:bob (seen 000000000000002)
}

// Keys is the canonical encoding of a set: the order keys are named in
// does not matter. Locker's methods, syncguard.Lock and syncguard.WithLock
// take it as their key.
func ExampleKeys() {
	fmt.Println(multilock.Keys("b", "a") == multilock.Keys("a", "b"))
	fmt.Println(multilock.Keys("b", "a"))
	_, err := multilock.ParseKeys(multilock.Keys("a", "a"))
	fmt.Println(syncguard.CodeOf(err))
	// Output:
	// true
	// multilock:["a","b"]
	// InvalidArgument
}

// On PostgreSQL: the tables once, then Lock with one timeout for the
// whole set.
func ExampleLock() {
	var db *sql.DB // opened with a registered driver; see syncguard's package doc
	ctx := context.Background()
	if err := multilock.SetupSchema(ctx, db, nil); err != nil {
		log.Fatal(err)
	}
	locks, err := multilock.New(db, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close()
	lease, err := multilock.Lock(ctx, locks, []string{"stock:42", "order:7"}, &syncguard.LockOptions{
		TTL: 30 * time.Second, AutoExtend: true,
		Acquisition: syncguard.AcquisitionOptions{Timeout: 5 * time.Second}, // the whole wait, not per key
	})
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Close()
	for _, f := range lease.Fences() {
		fmt.Println(f.Key, f.Fence) // pass each to the resource that key protects
	}
}
