// Package syncguard provides distributed locks with fencing tokens on
// PostgreSQL, through database/sql. It implements the SyncGuard lock design,
// so Go and Node.js services can share the same lock tables.
//
// # Setup
//
// Import one adapter for your driver, create the tables once, and make a
// Backend (safe for concurrent use; keep one per *sql.DB):
//
//	import (
//		_ "github.com/jackc/pgx/v5/stdlib"
//		_ "github.com/syncguard/syncguard-go/pgxstd" // or .../pq for lib/pq
//		"github.com/syncguard/syncguard-go/syncguard"
//	)
//
//	db, _ := sql.Open("pgx", dsn)
//	if err := syncguard.SetupSchema(ctx, db, nil); err != nil { ... }
//	locks, err := syncguard.New(db, nil)
//
// # Guarantees
//
//   - Mutual exclusion: at most one holder of a key at a time, decided by
//     PostgreSQL's clock. A lock is live while expires_at_ms > now_ms - 1000.
//   - Fences: each successful Acquire of a key returns a Fence strictly
//     greater than every earlier one for that key, across releases, expiry,
//     processes and server restarts. Pass it to the resource you protect and
//     have it reject smaller fences: that is what keeps a paused or
//     partitioned former holder from doing harm.
//   - One statement per operation: Acquire, Release, Extend, IsLocked and the
//     lookups are each a single SQL statement, one round trip once prepared.
//   - Validation first: bad keys, lockIds and TTLs fail with
//     ErrInvalidArgument before any I/O.
//   - Every error is a *Error with a Code; errors.Is(err, ErrXxx) tests it.
//     Contention is a result (AcquireResult.OK == false), not an error.
//
// Backend.WithTx runs the same operations inside a caller's transaction.
// The docs/ directory of the repository holds the design, the failure
// model and measured performance.
package syncguard
