// Package semaphore is a fenced counting semaphore in PostgreSQL: N
// permits per key, each permit a lease (TTL, AutoExtend, loss signal,
// release) with a slot and a fence that a resource can check.
//
//	exports, err := semaphore.New(db, nil, 3) // at most 3 at once
//	p, err := exports.Lock(ctx, "exports", &syncguard.LockOptions{AutoExtend: true})
//	...
//	defer p.Close()
//	write(p.FenceKey(), p.Fence()) // the resource keeps the highest fence per FenceKey
//
// A Semaphore is a syncguard.LockBackend with a queue (Queue): the
// core's Lock and WithLock wait for a permit in the key's queue and give
// a *syncguard.Lease, so everything built on leases (the CLI's run,
// telemetry, otelsyncguard) works with permits unchanged. Semaphore.Lock
// also returns the permit's slot.
//
// Guarantees, on the server's clock: at most N live permits per key;
// each key has slots 1..N, each slot held by one permit at a time with
// its own fence counter, strictly increasing (each slot is a fenced
// mutex: a resource compares fences of the same FenceKey(key, slot));
// waiters are served in strict FIFO order (a later caller never takes a
// permit while an earlier live waiter waits, even a free one); a release
// hands its slot to the first waiter in its own commit; a holder that
// crashes loses its permit at its TTL plus the spec's 1 s tolerance. The
// first acquire of a key fixes its number of permits; an acquire through
// a Semaphore of another number fails with ErrPermitsMismatch
// (InvalidArgument) and takes nothing.
//
// The tables (Tables, SchemaSQL, SetupSchema) are the semaphore's own,
// named from syncguard.Config.TableName: a key used as a semaphore never
// shares a row or a fence counter with the mutex of the same name. See
// docs/semaphore.md.
package semaphore
