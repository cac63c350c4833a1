// Package rwlock is a read-write lock on PostgreSQL with syncguard's
// rules: shared (read) and exclusive (write) leases on one key, FIFO fair
// (a queued writer blocks later readers, so no writer starves), the run of
// readers at the head of the queue admitted together in one commit, a
// per-key writer fence (strictly increasing) and, on a reader's lease, its
// writer generation (the key's latest writer fence at its admission).
//
// RWLock.Shared and RWLock.Exclusive are syncguard.LockBackends with a
// queue (a Queue method): syncguard.Lock and WithLock give their leases a TTL,
// AutoExtend, the loss signal and a place in the key's queue. The tables
// ("<TableName>_rw", "_rw_keys", "_rw_waiters") and SQL functions are the
// package's own (SetupSchema, SchemaSQL): a key used as a read-write lock
// shares nothing with the mutex of the same name. See docs/rwlock.md for
// the guarantees, the SQL and the fence recipe.
package rwlock
