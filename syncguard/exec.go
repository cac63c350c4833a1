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
	"github.com/syncguard/syncguard-go/internal/stmtfunc"
)

// Running the statements, prepared or one-shot ("Statements and round
// trips" in docs/design.md).

// Prepared-statement modes of a Backend (shared.prep).
const (
	prepUnknown = iota // not decided: probe for a pooler before the first prepare
	prepOn             // prepare each statement once per connection
	prepOff            // one-shot statements (Config.DisablePrepare, or a pooler)
)

// sentArg records when it is converted for sending, which database/sql
// (and pgx) does just before the statement goes out, once it has a
// connection: an acquire whose sentArg was not converted never went out.
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
// its one row into dest. On the pool a serialization failure (40001, 40P01)
// aborted the statement: it runs once more in an explicit READ COMMITTED
// transaction ("Isolation level" in docs/design.md).
func (b *Backend) run(ctx context.Context, i int, args []any, dest ...any) error {
	s := b.shared
	viaFunc := s.sql.funcs[i] != "" && !s.noFuncs.Load() // a prepared statement i is its function's call
	prepared, err := b.attempt(ctx, i, args, dest)
	if err == nil || ctx.Err() != nil {
		return err
	}
	// A prepared statement that cannot serve did not run: its function
	// was dropped after its call was prepared (the statement is prepared
	// instead), or a pooler lost it (one-shot from now on). On the pool it
	// runs again; the caller's transaction is aborted, and its retry runs
	// the new way.
	lost := prepared && viaFunc && s.funcLost(err)
	if lost {
		s.dropFuncStmts()
	} else if lost = prepared && s.preparedLost(err); lost {
		s.switchOff(slog.LevelWarn, "a prepared statement was lost between server connections ("+s.sqlState(err)+"): a connection pooler in transaction mode?")
	}
	if lost {
		if b.tx != nil {
			return err
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
			// a transaction of another kind (an ORM's): one-shot
		case b.tx != nil:
			if stmt := s.stmts[i].stmt.Load(); stmt != nil {
				return true, b.stmtTx.StmtContext(ctx, stmt).QueryRowContext(ctx, args...).Scan(dest...)
			}
			// Preparing on the pool would need a second connection (a
			// deadlock with SetMaxOpenConns(1)): one-shot now.
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
	return false, b.oneShotOp(ctx, i, args, dest)
}

// oneShot runs query unprepared, as pooler.Statement sends it; dest nil
// means no row is read (an Exec).
func (b *Backend) oneShot(ctx context.Context, query string, args, dest []any) error {
	s := b.shared
	var on rowQuerier = s.db
	if b.tx != nil {
		on = b.tx
	} else if s.oneShotArgs == nil {
		// the connection first: inlining marks a sentArg only once there is one
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
	if dest != nil {
		return on.QueryRowContext(ctx, query, args...).Scan(dest...)
	}
	e, ok := on.(interface { // an Exec: on the pool or a connection
		ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	})
	if !ok {
		return fmt.Errorf("syncguard: internal: exec on %T", on)
	}
	_, err = e.ExecContext(ctx, query, args...)
	return err
}

type rowQuerier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// sqlState is err's SQLSTATE as the dialect reads it.
func (s *shared) sqlState(err error) string {
	if s.cfg.Dialect == nil {
		return ""
	}
	return s.cfg.Dialect.Inspect(err).SQLState
}

func (s *shared) serializationFailure(err error) bool {
	st := s.sqlState(err)
	return st == "40001" || st == "40P01"
}

func (s *shared) preparedLost(err error) bool { return pooler.StatementLost(s.sqlState(err), err) }

// switchOff turns prepared statements off for the Backend's life, logging
// why once (Info for the probe, Warn for a lost statement).
func (s *shared) switchOff(level slog.Level, reason string) {
	if s.prep.Swap(prepOff) == prepOff {
		return
	}
	how := "its arguments inlined as literals (simple query protocol)"
	if s.oneShotArgs != nil {
		how = "one unnamed Parse/Bind/Execute batch"
	}
	s.cfg.Logger.Log(context.Background(), level,
		"syncguard: prepared statements switched off for this Backend; every statement is now sent unprepared as "+how+", still one round trip",
		slog.String("reason", reason), slog.String("dialect", s.cfg.Dialect.Name()))
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
// use (a failure is not cached); nil, nil when prepared statements are
// off. Two first calls may both prepare: the loser closes its copy.
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
		return nil, nil // switched off since the caller looked: nothing may be prepared any more
	}
	st, err := s.prepare(ctx, i)
	if err != nil {
		return nil, err
	}
	if !l.stmt.CompareAndSwap(nil, st) {
		st.Close()
		return l.stmt.Load(), nil
	}
	return st, nil
}

// prepare prepares statement i on the pool: the call of its statement
// function while the functions serve (each session then plans the
// statement once, generically, where a prepared statement is planned with
// its values at its first five executions: "Planning" in docs/design.md),
// else the statement itself.
func (s *shared) prepare(ctx context.Context, i int) (*sql.Stmt, error) {
	if call := s.sql.funcs[i]; call != "" && !s.noFuncs.Load() {
		st, err := s.db.PrepareContext(ctx, call)
		if err == nil {
			s.funcsOK.Store(true)
		}
		if err == nil || ctx.Err() != nil || !s.funcLost(err) {
			return st, err
		}
	}
	return s.db.PrepareContext(ctx, s.sql.ops[i])
}

// dropFuncStmts forgets the prepared calls of statement functions, after
// funcLost: their statements are prepared at their next use.
func (s *shared) dropFuncStmts() {
	for i := range s.stmts {
		if s.sql.funcs[i] == "" {
			continue
		}
		if st := s.stmts[i].stmt.Swap(nil); st != nil {
			st.Close()
		}
	}
}

// probe decides, once before anything is prepared, whether a pooler sits
// in between (pooler.Detect), which turns prepared statements off. Without
// a driver.BackendPIDReader the answer is "prepare" (a pooler's errors
// switch them off later).
func (s *shared) probe(ctx context.Context) error {
	s.probeMu.Lock()
	defer s.probeMu.Unlock()
	if s.prep.Load() != prepUnknown {
		return nil
	}
	if _, ok := s.cfg.Dialect.(driver.BackendPIDReader); !ok {
		s.prep.CompareAndSwap(prepUnknown, prepOn)
		return nil
	}
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	v, err := pooler.Detect(ctx, conn, s.cfg.Dialect, s.oneShotArgs)
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

// prepareInBackground prepares statement i on the pool, at most one
// goroutine per statement.
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

// oneShotOp runs statement i unprepared: through its function while the
// function serves (in a caller's transaction only once one has served on
// the pool, so that a missing function does not abort that transaction),
// else the statement itself.
func (b *Backend) oneShotOp(ctx context.Context, i int, args, dest []any) error {
	s := b.shared
	call := s.unprepFn[i]
	if call == "" || s.noFuncs.Load() || (b.tx != nil && !s.funcsOK.Load()) {
		return b.oneShot(ctx, s.unprep[i], args, dest)
	}
	err := b.oneShot(ctx, call, args, dest)
	switch {
	case err == nil:
		s.funcsOK.Store(true)
		return nil
	case ctx.Err() != nil || !s.funcLost(err):
		return err
	case b.tx != nil:
		return err // the caller's transaction is aborted; its retry sends the statement
	}
	return b.oneShot(ctx, s.unprep[i], args, dest)
}

// funcLost reports whether err says that a statement function is missing
// or not granted: the Backend then sends the statements themselves for
// good, warning once.
func (s *shared) funcLost(err error) bool {
	if !stmtfunc.Missing(s.cfg.TableName, s.sqlState(err), err.Error()) {
		return false
	}
	if !s.noFuncs.Swap(true) {
		s.cfg.Logger.Warn("syncguard: the statement functions of this version are missing or not granted: run SetupSchema (or apply SchemaSQL); until then statements sent unprepared are planned at each execution",
			slog.String("table", s.cfg.TableName))
	}
	return true
}
