// Package txguard makes writes commit only while a syncguard lease holds,
// when the protected resource is a table in the same PostgreSQL database
// as the locks.
//
// A fencing token leaves the check to the resource. Here the database
// does it: Guard.Hold, called in the caller's *sql.Tx, checks that the
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
// Callers who write SQL get the same check inside their own statement
// from the function that Setup creates (SchemaSQL), which returns the
// lease's fence or raises SQLSTATE SG001. Resources that keep a fence
// column get a trigger that rejects a write carrying a fence below the
// stored one (FenceGuardSQL, SetupFenceGuard; SQLSTATE SG002).
//
// The trade-offs (a takeover waits for the holder's transaction, lock
// order with the caller's own row locks and 40P01, isolation levels,
// interop with the reference implementation) are in docs/txguard.md.
package txguard
