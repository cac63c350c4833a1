package syncguard

import (
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	"errors"
	"io"
	"strings"
	"testing"
	"time"
)

// answerAfterCancel is a database/sql driver whose statements end the
// caller's context while they run and then answer with the committed row:
// what lib/pq returns when its cancel request cuts a commit's wait for a
// synchronous standby (PostgreSQL then reports success, with a WARNING, for
// a commit only the primary has).
type answerAfterCancel struct{ cancel func() }

func (a *answerAfterCancel) Connect(context.Context) (sqldriver.Conn, error) {
	return (*aacConn)(a), nil
}
func (a *answerAfterCancel) Driver() sqldriver.Driver { return aacDriver{} }

type aacDriver struct{}

func (aacDriver) Open(string) (sqldriver.Conn, error) { return nil, errors.New("use the connector") }

type aacConn answerAfterCancel

func (c *aacConn) Prepare(string) (sqldriver.Stmt, error) { return nil, errors.New("no prepare") }
func (c *aacConn) Close() error                           { return nil }
func (c *aacConn) Begin() (sqldriver.Tx, error)           { return nil, errors.New("no transactions") }

func (c *aacConn) QueryContext(_ context.Context, q string, args []sqldriver.NamedValue) (sqldriver.Rows, error) {
	c.cancel()
	switch {
	case strings.Contains(q, "INSERT INTO"): // acquire: our lockId won
		return &oneRow{vals: []sqldriver.Value{args[1].Value, int64(2000), int64(1000), "000000000000001", false}}, nil
	case strings.Contains(q, "UPDATE"): // extend: updated
		return &oneRow{vals: []sqldriver.Value{args[0].Value, int64(9000), int64(5000), int64(1000)}}, nil
	default: // the background release of the orphan
		return &oneRow{vals: []sqldriver.Value{args[0].Value, int64(5000), int64(1000)}}, nil
	}
}

type oneRow struct {
	vals []sqldriver.Value
	done bool
}

func (r *oneRow) Columns() []string {
	cols := make([]string, len(r.vals))
	for i := range cols {
		cols[i] = string(rune('a' + i))
	}
	return cols
}
func (r *oneRow) Close() error { return nil }
func (r *oneRow) Next(dest []sqldriver.Value) error {
	if r.done {
		return io.EOF
	}
	r.done = true
	copy(dest, r.vals)
	return nil
}

// TestResultAfterContextEndIsNotReported: an acquire or extend whose
// context ended while it ran is never reported as done, even when the
// driver hands back the committed row (see unconfirmed).
func TestResultAfterContextEndIsNotReported(t *testing.T) {
	for i := 0; i < 20; i++ {
		ctx, cancel := context.WithCancel(context.Background())
		db := sql.OpenDB(&answerAfterCancel{cancel: cancel})
		b, err := New(db, &Config{Dialect: fakeDialect{}, DisablePrepare: true, ReleaseTimeout: 50 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		res, err := b.Acquire(ctx, "k", time.Second)
		if res.OK || err == nil {
			t.Fatalf("acquire whose context ended while it ran: got %+v, %v; want an error of unknown outcome", res, err)
		}
		wantCode(t, err, ErrAborted)

		ctx, cancel = context.WithTimeout(context.Background(), time.Minute)
		b2, _ := New(sql.OpenDB(&answerAfterCancel{cancel: cancel}), &Config{Dialect: fakeDialect{}, DisablePrepare: true})
		x, err := b2.Extend(ctx, goodID, time.Second)
		if x.OK || err == nil {
			t.Fatalf("extend whose context ended while it ran: got %+v, %v; want an error of unknown outcome", x, err)
		}
		db.Close()
	}
}
