package syncguard

import (
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/syncguard/syncguard-go/driver"
	"github.com/syncguard/syncguard-go/internal/pooler"
)

// This file runs the statements: prepared (the default, one round trip
// once prepared on a connection) or one-shot (unprepared, still one round
// trip, safe behind a transaction-mode pooler), with the two automatic
// corrections of the pool path: a re-run in READ COMMITTED after a
// serialization failure, and the switch to one-shot statements when a
// pooler drops prepared statements.

// Prepared-statement modes of a Backend (shared.prep).
const (
	prepUnknown = iota // not decided: probe for a pooler before the first prepare
	prepOn             // prepare each statement once per connection
	prepOff            // one-shot statements (Config.DisablePrepare, or a pooler)
)

// sentArg is an argument that records when it is converted for sending.
// database/sql (and pgx, which converts arguments itself) does that only
// after it obtained a connection and, for a prepared statement, prepared it
// there: just before the statement goes out. An acquire whose sentArg was
// never converted cannot have reached the server.
type sentArg struct {
	v    string
	sent atomic.Bool
}

// String is v, for drivers that format arguments.
func (a *sentArg) String() string { return a.v }

// Value implements driver.Valuer.
func (a *sentArg) Value() (sqldriver.Value, error) {
	a.sent.Store(true)
	return a.v, nil
}

// run runs statement i with args on the transaction or the pool and scans
// its one row into dest.
//
// On the pool path a serialization failure (40001) or deadlock (40P01)
// means the session's default isolation is not READ COMMITTED (a role,
// database or DSN setting): the statement was aborted, nothing committed,
// where READ COMMITTED would have re-checked the latest row version (or,
// under SERIALIZABLE, never conflicted at all: predicate locks on shared
// index pages make statements on unrelated keys conflict). run then runs
// the statement once more in an explicit READ COMMITTED transaction, which
// gives the answer the statement gives under PostgreSQL's default. The
// common case stays one round trip; the retry costs three more (BEGIN, the
// statement, COMMIT). See docs/design.md, "Isolation level".
//
// A prepared statement that a pooler lost (see preparedLost) did not run:
// the Backend switches to one-shot statements for good and, on the pool
// path, runs this one again that way.
func (b *Backend) run(ctx context.Context, i int, args []any, dest ...any) error {
	s := b.shared
	prepared, err := b.attempt(ctx, i, args, dest)
	if err == nil || ctx.Err() != nil {
		return err
	}
	if prepared && s.preparedLost(err) {
		s.switchOff(slog.LevelWarn, "a prepared statement was lost between server connections ("+s.sqlState(err)+"): a connection pooler in transaction mode?")
		if b.tx != nil {
			return err // the caller's transaction is aborted; its retry runs one-shot
		}
		if _, err = b.attempt(ctx, i, args, dest); err == nil || ctx.Err() != nil {
			return err
		}
	}
	if b.tx != nil || !s.serializationFailure(err) {
		return err
	}
	return s.runReadCommitted(ctx, i, args, dest)
}

// attempt runs statement i once and scans its row; prepared tells whether
// it went out as a prepared statement.
func (b *Backend) attempt(ctx context.Context, i int, args, dest []any) (prepared bool, err error) {
	s := b.shared
	if s.prep.Load() != prepOff {
		switch {
		case b.tx != nil && b.stmtTx == nil:
			// A transaction of another kind (an ORM's): one-shot.
		case b.tx != nil:
			if stmt := s.stmts[i].stmt.Load(); stmt != nil {
				// Reuses the statement already prepared on the transaction's
				// connection, or prepares it there once.
				return true, b.stmtTx.StmtContext(ctx, stmt).QueryRowContext(ctx, args...).Scan(dest...)
			}
			// Preparing on the pool would need a second connection while
			// the transaction holds one (a deadlock with
			// SetMaxOpenConns(1)). Run one-shot on the transaction's
			// connection, and prepare on the pool in the background.
			s.prepareInBackground(i)
		default:
			stmt, err := s.prepared(ctx, i)
			if err != nil {
				return true, err // a failed prepare: 42P05 is a pooler's doing
			}
			if stmt != nil {
				return true, stmt.QueryRowContext(ctx, args...).Scan(dest...)
			}
			// The probe just switched prepared statements off.
		}
	}
	return false, b.oneShot(ctx, s.unpreparedText(i), args, dest)
}

// oneShot runs query unprepared, in one round trip, as internal/pooler
// sends it (pooler.Statement: with the dialect's OneShotArgs, or else with
// the arguments inlined as literals). dest nil means no row is read (an
// Exec).
func (b *Backend) oneShot(ctx context.Context, query string, args, dest []any) error {
	s := b.shared
	var on rowQuerier = s.db
	if b.tx != nil {
		on = b.tx
	} else if s.oneShotArgs == nil {
		// Take the connection first, so that a sentArg is marked (by
		// inlining) only once a connection was obtained, as on the other
		// paths.
		conn, err := s.db.Conn(ctx)
		if err != nil {
			return err
		}
		defer conn.Close()
		on = conn
	}
	query, args, err := pooler.Statement(s.oneShotArgs, query, args)
	if err != nil {
		return err
	}
	return queryOn(ctx, on, query, args, dest)
}

// rowQuerier is a *sql.DB, *sql.Conn or a Tx.
type rowQuerier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// queryOn runs query on q and scans its row into dest; dest nil runs it
// as an Exec, on the pool or a connection (a *sql.DB or *sql.Conn).
func queryOn(ctx context.Context, q rowQuerier, query string, args, dest []any) error {
	if dest == nil {
		e, ok := q.(interface {
			ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
		})
		if !ok {
			return fmt.Errorf("syncguard: internal: exec on %T", q)
		}
		_, err := e.ExecContext(ctx, query, args...)
		return err
	}
	return q.QueryRowContext(ctx, query, args...).Scan(dest...)
}

// sqlState is err's SQLSTATE as the dialect reads it.
func (s *shared) sqlState(err error) string {
	if s.cfg.dialect == nil {
		return ""
	}
	return s.cfg.dialect.Inspect(err).SQLState
}

// serializationFailure reports whether err is a 40001 or 40P01 from the server.
func (s *shared) serializationFailure(err error) bool {
	st := s.sqlState(err)
	return st == "40001" || st == "40P01"
}

// preparedLost reports whether err says that a pooler lost a prepared
// statement (pooler.StatementLost, the one rule).
func (s *shared) preparedLost(err error) bool { return pooler.StatementLost(s.sqlState(err), err) }

// switchOff turns prepared statements off for the rest of the Backend's
// life, logging why once: at Info when a probe found a pooler before
// anything failed, at Warn when a lost statement made an operation retry.
func (s *shared) switchOff(level slog.Level, reason string) {
	if s.prep.Swap(prepOff) == prepOff {
		return
	}
	how := "its arguments inlined as literals (simple query protocol)"
	if s.oneShotArgs != nil {
		how = "one unnamed Parse/Bind/Execute batch"
	}
	s.cfg.logger.Log(context.Background(), level,
		"syncguard: prepared statements switched off for this Backend; every statement is now sent unprepared as "+how+", still one round trip",
		slog.String("reason", reason), slog.String("dialect", s.cfg.dialect.Name()))
}

// runReadCommitted runs statement i in its own READ COMMITTED transaction.
func (s *shared) runReadCommitted(ctx context.Context, i int, args, dest []any) error {
	tx, err := s.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return err
	}
	if _, err := (&Backend{shared: s, tx: tx, stmtTx: tx}).attempt(ctx, i, args, dest); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

// prepared returns the *sql.Stmt for statement i, preparing it on first
// use; nil, with a nil error, when prepared statements are off (switched
// off by the pooler probe, or by another goroutine since the caller
// looked). database/sql then prepares it again, once, on each pooled
// connection that runs it. A failed prepare (a missing table, say)
// is not cached. No lock is held while preparing: two first calls may both
// prepare, and the loser closes its copy.
func (s *shared) prepared(ctx context.Context, i int) (*sql.Stmt, error) {
	l := &s.stmts[i]
	if st := l.stmt.Load(); st != nil {
		return st, nil
	}
	if s.prep.Load() == prepUnknown {
		if err := s.probe(ctx); err != nil {
			return nil, err
		}
	}
	if s.prep.Load() == prepOff {
		// Switched off by the probe just run, or by another goroutine's
		// since the caller looked: nothing may be prepared any more.
		return nil, nil
	}
	st, err := s.db.PrepareContext(ctx, s.text(i))
	if err != nil {
		return nil, err
	}
	if !l.stmt.CompareAndSwap(nil, st) {
		st.Close()
		return l.stmt.Load(), nil
	}
	return st, nil
}

// probe decides, once per Backend and before anything is prepared,
// whether a connection pooler sits between the pool and PostgreSQL
// (pooler.Detect, the one detector, which CheckDeployment's "pooler" check
// uses too). A pooler may run one client's statements on different server
// connections, where a prepared statement is missing or, worse, another
// client's statement of the same name, so prepared statements are switched
// off. Without a dialect that reads the announced pid
// (driver.BackendPIDReader) the answer is "prepare", and the errors a
// pooler causes switch them off later. Costs one round trip, once.
func (s *shared) probe(ctx context.Context) error {
	s.probeMu.Lock()
	defer s.probeMu.Unlock()
	if s.prep.Load() != prepUnknown {
		return nil
	}
	if _, ok := s.cfg.dialect.(driver.BackendPIDReader); !ok {
		s.prep.CompareAndSwap(prepUnknown, prepOn)
		return nil
	}
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	v, err := pooler.Detect(ctx, conn, s.cfg.dialect, s.oneShotArgs)
	if err != nil {
		return err
	}
	if v.Pooler {
		s.switchOff(slog.LevelInfo, fmt.Sprintf("connection pooler detected: the connection announced backend pid %d at startup, the server session is pid %d", v.Announced, v.Session))
		return nil
	}
	s.prep.CompareAndSwap(prepUnknown, prepOn)
	return nil
}

// prepareInBackground prepares statement i on the pool without blocking
// the caller; at most one such goroutine runs per statement.
func (s *shared) prepareInBackground(i int) {
	l := &s.stmts[i]
	if !l.preparing.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer l.preparing.Store(false)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = s.prepared(ctx, i) // errors surface on the next foreground use
	}()
}
