// Package txguard makes writes commit only while a syncguard lease holds,
// when the protected resource is a table in the same PostgreSQL database
// as the locks.
//
// A fencing token leaves the check to the resource. Here the database
// does it: Guard.Hold, called in the caller's transaction (a *sql.Tx, or
// an ORM's, as Backend.WithTx takes it), checks that the
// lease (key and lockId) is live by the server's clock and locks its lock
// row FOR KEY SHARE until the transaction ends. No takeover of the key
// (syncguard's acquire and release, Revoke, cleanup, the reference
// implementation's SELECT ... FOR UPDATE) can commit before the
// transaction does, while the holder's own extends go through. So the
// transaction's writes commit only if the lease held when they were
// checked, and before any later holder's:
//
//	tx, err := db.BeginTx(ctx, nil)
//	...
//	defer tx.Rollback()
//	if _, err := guard.HoldLease(ctx, tx, lease); err != nil {
//		return err // errors.Is(err, syncguard.ErrLockLost): roll back
//	}
//	// ... writes in tx ...
//	return tx.Commit()
//
// HoldLease checks a lease of every kind of lock, with the same
// guarantee: a mutex's lock row, a semaphore permit's slot row and an
// rwlock reader's or writer's holder row FOR KEY SHARE (the holder's
// extends go through), and the row of every key of a multilock set FOR
// SHARE (the set's extends wait for the transaction).
//
// Callers who write SQL get the same check inside their own statement
// from the functions that Setup creates (SchemaSQL), one per kind, which
// return the lease's fence or raise SQLSTATE SG001. Resources that keep a fence
// column get a trigger that rejects a write carrying a fence below the
// stored one (FenceGuardSQL, SetupFenceGuard; SQLSTATE SG002).
//
// The trade-offs (a takeover waits for the holder's transaction, lock
// order with the caller's own row locks and 40P01, isolation levels,
// interop with the reference implementation) are in docs/txguard.md.
package txguard
