// Package multilock takes several keys at once, as one lock: every key of
// a set or none, in one statement, with a fence per key, on the same
// tables design as syncguard's mutex (a queue of waiters under table
// privileges, a hand-off in the release's commit, expiry on the server's
// clock) but tables of its own (TablesOf), so that a key locked here is
// independent of the mutex of the same name.
//
// A Locker is a syncguard.LockBackend with a queue (Queue) whose key is an
// encoded set (Keys("b", "a") == Keys("a", "b")): syncguard.Lock and
// WithLock work on it unchanged, one lockId and one Lease for the set, and
// Lock and WithLock of this package return the per-key fences too:
//
//	locks, _ := multilock.New(db, nil) // after multilock.SetupSchema
//	lease, err := multilock.Lock(ctx, locks, []string{"stock:42", "order:7"}, nil)
//	...
//	defer lease.Close()
//	f, _ := lease.FenceOf("stock:42") // what the stock resource checks
//
// No deadlock whatever order callers name their keys in: a waiter keeps
// one place for all its keys, and a set is taken only when every key is
// free and no waiter placed earlier wants any of them; inside PostgreSQL
// every statement locks its keys' counter rows in one order before it
// writes. Acquisition.Timeout bounds the whole wait once. docs/multilock.md
// has the guarantees, the SQL and the comparison with other libraries;
// syncguardtest.NewMultiLock is the in-memory fake.
package multilock
