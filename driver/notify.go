package driver

import (
	"context"
	"database/sql"
)

// Listener is an optional Dialect capability: receiving PostgreSQL
// notifications (LISTEN/NOTIFY). The core uses it to wake the callers of
// syncguard.Lock and WithLock that wait for a contended key the moment the
// key is released, instead of at their next retry. A Dialect without it
// still works: waiting then polls (see the waiting section of
// docs/design.md).
//
// The core opens at most one listener per syncguard.Backend, shares it among
// all of that Backend's waiters, and closes it when nobody has waited for a
// while.
type Listener interface {
	// Listen opens a dedicated connection, not one of db's pooled
	// connections (so a waiting program never holds a pool slot for it),
	// to the database db is connected to, and runs LISTEN on channel
	// (passed as is; the implementation quotes it). db is the pool the
	// Backend runs on; an implementation may borrow one of its connections
	// briefly, to learn how to connect. It returns once LISTEN has taken
	// effect: every notification committed afterwards reaches the returned
	// connection. Errors are returned as the driver reports them.
	Listen(ctx context.Context, db *sql.DB, channel string) (NotifyConn, error)
}

// NotifyConn is a connection opened by Listener.Listen. The core uses it
// from one goroutine at a time: its methods need not be safe for concurrent
// use.
type NotifyConn interface {
	// Wait blocks until the next notification arrives on the channel and
	// returns its payload, or until ctx is done (returning an error for
	// which ctx.Err() != nil; the connection stays usable), or until the
	// connection fails (any other error; the core then closes it).
	// Notifications that arrive while nobody waits are kept, in order, for
	// the next call.
	Wait(ctx context.Context) (payload string, err error)
	// Ping checks the connection with a round trip.
	Ping(ctx context.Context) error
	// Exec runs sql, one or more statements without parameters, as one
	// simple query (so in one implicit transaction), and discards any rows.
	// A statement that fails on the server returns the driver's error
	// (Dialect.Inspect reads its SQLSTATE) and leaves the connection
	// usable; any other error means the connection failed.
	Exec(ctx context.Context, sql string) error
	// Close closes the connection.
	Close() error
}
