// Package pooler is the one home of what syncguard knows about a
// connection pooler (PgBouncer, pgcat, RDS Proxy, ...) between a
// database/sql pool and PostgreSQL: how to tell that one answers for the
// server (Detect) and whether it runs a connection's statements in several
// server sessions (TransactionMode), which errors mean it lost a prepared
// statement (StatementLost), and how to send a statement it cannot lose
// (Unprepared). The Backend and doctor.Check both use it, so that they
// judge a deployment alike.
package pooler

import (
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/syncguard/syncguard-go/driver"
)

// StatementLost reports whether an error with SQLSTATE sqlState says that a
// prepared statement was not where the client prepared it: 26000 (does not
// exist), 42P05 (already exists), or 08P01 from a Bind that reached another
// statement of the same name. A transaction-mode pooler (PgBouncer before
// 1.21, or with max_prepared_statements = 0) causes all three. None ran the
// statement.
func StatementLost(sqlState string, err error) bool {
	switch sqlState {
	case "26000", "42P05":
		return true
	case "08P01":
		msg := err.Error()
		return strings.Contains(msg, "prepared statement") || strings.Contains(msg, "bind message")
	}
	return false
}

// Verdict is what Detect found on one connection.
type Verdict struct {
	// Known: the dialect read the backend pid the connection announced at
	// startup. When false, Detect could not tell and Pooler is false.
	Known bool
	// Pooler: the announced pid is not the server session's: a pooler
	// answered the connection's startup.
	Pooler bool
	// Announced and Session are the two pids.
	Announced, Session int
}

// Detect tells whether a pooler answers for the server on conn: the backend
// pid the connection announced at startup (BackendKeyData) is then the
// pooler's own, not pg_backend_pid(). It needs a dialect that reads that pid
// (driver.BackendPIDReader); without one the Verdict is not Known. One round
// trip, unprepared (oneShot as for Unprepared): nothing named is left on a
// server session a pooler could hand to another client.
func Detect(ctx context.Context, conn *sql.Conn, d driver.Dialect, oneShot []any) (Verdict, error) {
	var v Verdict
	pr, ok := d.(driver.BackendPIDReader)
	if !ok {
		return v, nil
	}
	_ = conn.Raw(func(dc any) error {
		v.Announced, v.Known = pr.BackendPID(dc)
		return nil
	})
	if !v.Known {
		return v, nil
	}
	if err := QueryRow(ctx, Unprepared(conn, oneShot), "SELECT pg_backend_pid()", nil, &v.Session); err != nil {
		return Verdict{}, err
	}
	v.Pooler = v.Session != v.Announced
	return v, nil
}

// TransactionMode tells whether a pooler in transaction or statement mode
// sits between two client connections a and b and the server: b holds a
// transaction open (and so a server session) while a runs a statement,
// rounds times over. Directly or through a session-mode pool, a always runs
// in one server session and b in another; through a transaction-mode pool,
// a's statements land in several sessions, or b gets the session a just
// used. sessions is the number of server sessions a's statements ran in;
// first is the first of them.
func TransactionMode(ctx context.Context, a, b *sql.Conn, oneShot []any, rounds int) (yes bool, sessions, first int, err error) {
	pid := func(q Querier) (p int, err error) {
		err = QueryRow(ctx, Unprepared(q, oneShot), "SELECT pg_backend_pid()", nil, &p)
		return p, err
	}
	if first, err = pid(a); err != nil {
		return false, 0, 0, err
	}
	aPIDs, bPIDs := map[int]bool{first: true}, map[int]bool{}
	for range rounds {
		tx, err := b.BeginTx(ctx, nil)
		if err != nil {
			return false, 0, 0, err
		}
		pb, err1 := pid(tx)
		pa, err2 := pid(a)
		_ = tx.Rollback()
		if err := errors.Join(err1, err2); err != nil {
			return false, 0, 0, err
		}
		aPIDs[pa], bPIDs[pb] = true, true
	}
	shared := false
	for p := range bPIDs {
		shared = shared || aPIDs[p]
	}
	return len(aPIDs) > 1 || shared, len(aPIDs), first, nil
}

// Querier is a *sql.DB, *sql.Conn or *sql.Tx.
type Querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// Unprepared returns q sending every query unprepared, in one round trip:
// with the dialect's driver.OneShot arguments (oneShot) first, or, when
// oneShot is nil, with the arguments inlined as SQL literals (Statement).
func Unprepared(q Querier, oneShot []any) Querier { return unprepared{q, oneShot} }

type unprepared struct {
	q       Querier
	oneShot []any
}

func (u unprepared) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	query, args, err := Statement(u.oneShot, query, args)
	if err != nil {
		return nil, err
	}
	return u.q.QueryContext(ctx, query, args...)
}

// QueryRow runs query on q and scans its first row into dest
// (sql.ErrNoRows when there is none).
func QueryRow(ctx context.Context, q Querier, query string, args []any, dest ...any) error {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return err
		}
		return sql.ErrNoRows
	}
	if err := rows.Scan(dest...); err != nil {
		return err
	}
	return rows.Close()
}

// Statement is query with args as sent unprepared: oneShot (the dialect's
// driver.OneShot arguments) before args, which makes the driver send one
// unnamed Parse/Bind/Execute batch; or, when oneShot is nil, no arguments
// and args inlined as SQL literals, which database/sql drivers send by the
// simple query protocol. A pooler cannot split either across server
// sessions.
func Statement(oneShot []any, query string, args []any) (string, []any, error) {
	if oneShot != nil {
		a := make([]any, 0, len(oneShot)+len(args))
		return query, append(append(a, oneShot...), args...), nil
	}
	q, err := inline(query, args)
	return q, nil, err
}

// inline replaces the $n placeholders of query with args as SQL literals:
// strings as E'...' (backslashes and quotes doubled, valid under any
// standard_conforming_strings), integers in decimal; a driver.Valuer by
// its Value. Quoted strings and identifiers in query are left alone. The
// statements' parameters carry explicit casts ($1::text), so the literals
// get the same types.
func inline(query string, args []any) (string, error) {
	var b strings.Builder
	b.Grow(len(query) + 64)
	for i := 0; i < len(query); i++ {
		c := query[i]
		switch {
		case c == '\'' || c == '"':
			j := strings.IndexByte(query[i+1:], c)
			if j < 0 {
				return "", fmt.Errorf("syncguard: unterminated quote in statement")
			}
			b.WriteString(query[i : i+j+2])
			i += j + 1
		case c == '$' && i+1 < len(query) && query[i+1] >= '0' && query[i+1] <= '9':
			j := i + 1
			for j < len(query) && query[j] >= '0' && query[j] <= '9' {
				j++
			}
			n, _ := strconv.Atoi(query[i+1 : j])
			if n < 1 || n > len(args) {
				return "", fmt.Errorf("syncguard: statement parameter $%d without an argument", n)
			}
			if err := writeLiteral(&b, args[n-1]); err != nil {
				return "", err
			}
			i = j - 1
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), nil
}

func writeLiteral(b *strings.Builder, v any) error {
	switch x := v.(type) {
	case sqldriver.Valuer:
		val, err := x.Value()
		if err != nil {
			return err
		}
		return writeLiteral(b, val)
	case string:
		if strings.IndexByte(x, 0) >= 0 {
			return fmt.Errorf("syncguard: a NUL byte cannot be sent in a literal")
		}
		b.WriteString("E'")
		for i := 0; i < len(x); i++ {
			switch x[i] {
			case '\\':
				b.WriteString(`\\`)
			case '\'':
				b.WriteString(`''`)
			default:
				b.WriteByte(x[i])
			}
		}
		b.WriteByte('\'')
	case int64:
		b.WriteString(strconv.FormatInt(x, 10))
	case bool:
		b.WriteString(strconv.FormatBool(x))
	case nil:
		b.WriteString("NULL")
	case int:
		b.WriteString(strconv.Itoa(x))
	default:
		return fmt.Errorf("syncguard: cannot inline an argument of type %T", v)
	}
	return nil
}
