package syncguard

import (
	"context"
	"database/sql"
	"sync"
	"sync/atomic"
	"time"

	"github.com/syncguard/syncguard-go/internal/waiting"
)

// The state of a Backend, and nothing that acts on it.

// Backend is the PostgreSQL lock backend. It is safe for concurrent use;
// keep one for the life of the program. Each operation is one SQL statement
// and, once its statement is prepared on the connection, one round trip.
type Backend struct {
	shared *shared
	tx     Tx     // non-nil for the WithTx view
	stmtTx stmtTx // tx, when it can reuse prepared statements (*sql.Tx)
}

// Tx is what Backend.WithTx needs of the caller's transaction: the query
// methods of *sql.Tx, which *sqlx.Tx and GORM's tx.Statement.ConnPool have
// too (bun: bunTx.Tx; ent: its driver's *sql.Tx; docs/orm.md). When tx
// embeds a *sql.Tx (even in an embedded interface field), the statements
// run on that. Any other Tx must run them exactly as written ($n
// placeholders, the arguments as given): neither rewrite nor prepare them.
type Tx interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// stmtTx is a Tx that can run a statement prepared on the pool on its own
// connection (*sql.Tx, and types embedding it such as *sqlx.Tx).
type stmtTx interface {
	StmtContext(ctx context.Context, stmt *sql.Stmt) *sql.Stmt
}

type shared struct {
	db          *sql.DB
	cfg         resolved
	sql         statements
	cl          classifier
	stmts       [numStmts]lazyStmt
	unprep      [numStmts]string // the statements' text as sent unprepared (unpreparedMark)
	unprepFn    [numStmts]string // the calls of their functions, the same way ("" for none)
	lastCleanup atomic.Int64     // unix nanos of the last CleanupInIsLocked delete

	orphans     *orphanQueue   // background release (orphans.go)
	prep        atomic.Int32   // prepUnknown, prepOn or prepOff (exec.go)
	probeMu     sync.Mutex     // serializes the pooler probe
	oneShotArgs []any          // the dialect's driver.OneShot arguments, or nil
	waker       *waiting.Waker // wakes waiting Lock calls (wait.go)
	noQueue     atomic.Bool    // the waiters table is missing or not granted (wait.go)
	queueWarned atomic.Bool
	noHolders   atomic.Bool // the holders table is missing or not granted (wait.go)
	holdWarned  atomic.Bool
	noFuncs     atomic.Bool // the statement functions are missing or not granted (exec.go's funcLost)
	funcsOK     atomic.Bool // a statement function served (exec.go's oneShotOp)
	waitCfg     waitTunables
	kept        keptSet // lockIds whose release keeps the row (keep.go)
}

// orphanQueue is the state of a Backend's background release (orphans.go).
type orphanQueue struct {
	s *shared

	mu      sync.Mutex
	pending []orphan
	running bool // the worker goroutine is running
	warned  bool // the queue-full warning was logged
	wake    chan struct{}
}

// orphan is one lockId waiting for the background release.
type orphan struct {
	lockID  string
	due     time.Time // next attempt
	until   time.Time // the lock has expired by then: give up
	retries int       // not-found answers so far
}

// waitTunables are a Backend's waiting parameters (tests shorten them).
type waitTunables struct {
	window time.Duration  // a waiter's row lives this long after each attempt
	waker  waiting.Config // timeouts of the LISTEN connection
}

// lazyStmt is one operation's statement, prepared on first use on the pool.
type lazyStmt struct {
	stmt      atomic.Pointer[sql.Stmt]
	preparing atomic.Bool // a background prepare (for the WithTx path) is running
}

// unpreparedMark starts every statement sent unprepared, so that pgx does
// not run it as the same text prepared on the connection before the switch
// ("Statements and round trips" in docs/design.md).
const unpreparedMark = "/* syncguard: unprepared */ "
