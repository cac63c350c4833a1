// Package advisory is a first-class API for PostgreSQL advisory locks,
// beside the lease locks of package syncguard: transaction-scoped and
// session-scoped locks, well-mixed 64-bit lock ids derived from names, a
// registry of named locks that generates its own documentation, and
// pg_locks monitoring. It speaks only database/sql; errors are
// *syncguard.Error with syncguard's codes, and bad input is
// InvalidArgument before any I/O.
//
// # Transaction locks
//
// Client.LockTx and Client.TryLockTx lock inside the caller's *sql.Tx
// (pg_advisory_xact_lock, pg_try_advisory_xact_lock). The lock is released
// by commit or rollback:
//
//	tx, err := db.BeginTx(ctx, nil)
//	...
//	defer tx.Rollback()
//	key, err := bookingLock.Key(tenantID, date)
//	...
//	if err := locker.LockTx(ctx, tx, key); err != nil { return err }
//	// check for an existing booking, insert, commit
//
// A context that ends while LockTx waits cancels the wait on the server
// (not by closing the connection, which is what database/sql drivers do):
// LockTx returns Aborted (or AcquisitionTimeout for a deadline) promptly and
// tx can still be rolled back.
//
// # Session locks
//
// Session locks (pg_advisory_lock) belong to a connection, so they need a
// pinned *sql.Conn: Client.LockConn and Client.TryLockConn on a connection
// the caller holds, or Client.LockSession and Client.TryLockSession, which
// take their own from the pool. The returned SessionLock unlocks on Unlock
// or Close and never lets a connection that may still hold the lock back
// into the pool. An unlock that finds nothing held is reported (ErrNotHeld).
//
// Session locks do not work behind a pooler in transaction mode
// (PgBouncer pool_mode=transaction): consecutive statements run on
// different server sessions, so the unlock misses the lock, which then
// stays held by a server connection that other clients use. Use
// transaction locks there, or syncguard's lease locks.
//
// # Advisory locks or lease locks
//
// Advisory locks have no TTL and no fencing token. A transaction lock lives
// as long as its transaction; a session lock as long as its connection, and
// it is lost, silently, when the connection is: the holder learns of it
// only on its next statement (SessionLock.Held). For work that must not
// overlap even then, or that outlives a connection, use the lease locks of
// package syncguard, whose fences let the protected resource reject a
// stale holder.
//
// # Lock ids
//
// FromName derives a 64-bit id from a namespaced name with SHA-256; ID and
// Pair accept existing ids in PostgreSQL's two key forms; LegacyFNV1a32
// reproduces the 32-bit FNV-1a string hash of the hand-written pattern, for
// migrations. A Registry declares named locks in code, rejects duplicates
// and id collisions, and renders the registry table (Registry.Markdown).
//
// See docs/advisory.md in the repository for a worked example and the
// migration from hand-written advisory locks.
package advisory
