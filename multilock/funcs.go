package multilock

import (
	"context"
	"log/slog"
	"strings"

	"github.com/syncguard/syncguard-go/internal/stmtfunc"
)

// The statements that run through a statement function (funcs), by index.
const (
	opAcquire = iota
	opRelease
	opExtend
	numOps
)

var opFiles = [numOps]string{"acquire.sql", "release.sql", "extend.sql"}

// statements are a Locker's statements: each sent as itself (plain), and
// the call of its statement function (call; "" when the table's name is
// too long for one).
type statements struct {
	plain [numOps]string
	call  [numOps]string
	fns   []stmtfunc.Func
}

// maxFuncPrefix: a function's name is the prefix, "_op_" and 8 hex
// digits, within PostgreSQL's 63 bytes.
const maxFuncPrefix = 63 - 12

// statements renders the statements of t and their functions. A function
// runs its statement with the counter rows locked NOWAIT; only when another
// transaction holds one (55P03, that run undone) does it take the
// statement's lock alone (its CTEs up to g: the counter rows of every key
// it involves, in the one order, waiting) and run the statement again,
// with a snapshot taken once those rows are locked, so that its fresh
// check holds (no rerun after the wait) and its own lock, on rows it holds
// already, waits for none (a key that joined between the two steps,
// locked by another statement, is a 55P03 for the caller to run again
// from the start: never a wait out of the one order).
func (t Tables) statements() statements {
	var s statements
	prefix := t.Locks
	for i, file := range opFiles {
		plain := stripComments(t.renderWith(file, ""))
		s.plain[i] = plain
		if len(prefix) > maxFuncPrefix {
			continue
		}
		returns, _ := strings.CutPrefix(strings.SplitN(t.raw(file), "\n", 2)[0], "--returns ")
		f, err := stmtfunc.NewLocked(prefix, returns, lockStep(plain), stripComments(t.renderWith(file, "NOWAIT")))
		if err != nil {
			panic("multilock: sql/" + file + ": " + err.Error()) // embedded; TestRender renders every file
		}
		s.call[i] = f.Call
		s.fns = append(s.fns, f)
	}
	return s
}

// lockStep is a statement's lock alone: its CTEs up to g (the counter
// rows, FOR UPDATE in the one order), which every statement of the package
// declares just before chk.
func lockStep(stmt string) string {
	i := strings.Index(stmt, "\nchk AS MATERIALIZED (")
	if i < 0 || !strings.HasPrefix(stmt, "WITH\n") {
		panic("multilock: a statement without its lock (g) before chk")
	}
	return "SELECT 1 FROM (" + strings.TrimSuffix(strings.TrimSpace(stmt[:i]), ",") + "\nSELECT 1 FROM g) AS lk"
}

// runOp runs statement op through its function while the function serves,
// else the statement itself.
func (l *Locker) runOp(ctx context.Context, op int, args []any, dest ...any) error {
	call := l.sql.call[op]
	if call == "" || l.noFuncs.Load() {
		return l.run(ctx, l.sql.plain[op], args, dest...)
	}
	err := l.run(ctx, call, args, dest...)
	if err == nil || ctx.Err() != nil || !l.funcLost(err) {
		return err
	}
	return l.run(ctx, l.sql.plain[op], args, dest...)
}

// funcLost reports whether err says that a statement function is missing
// or not granted: the Locker then sends the statements themselves for
// good, warning once.
func (l *Locker) funcLost(err error) bool {
	if !stmtfunc.Missing(l.tables.Locks, l.dialect.Inspect(err).SQLState, err.Error()) {
		return false
	}
	if !l.noFuncs.Swap(true) {
		l.logger.Warn("multilock: the statement functions of this version are missing or not granted: run multilock.SetupSchema (or apply multilock.SchemaSQL); until then each statement is planned at every execution and reruns after waiting for its keys",
			slog.String("table", l.tables.Locks))
	}
	return true
}
