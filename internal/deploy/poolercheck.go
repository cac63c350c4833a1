package deploy

import (
	"database/sql"
	"fmt"

	"github.com/syncguard/syncguard-go/internal/pooler"
)

// poolerFailed records a pooler check that could not finish; a lost
// prepared statement is itself the sign of a transaction-mode pooler.
func (d *deployment) poolerFailed(err error) {
	detail, lost := d.describe(err)
	if !lost {
		d.couldNot("pooler", err)
		return
	}
	d.add("pooler", Warn, "a prepared statement went missing or clashed between server sessions ("+detail+
		"): a pooler in transaction or statement mode (PgBouncer, pgcat, RDS Proxy, ...) is in the way", poolerFix)
	d.preparedFailure(detail)
}

const poolerFix = "lease locks (Backend) work through it if prepared statements do (see below); session-scoped advisory locks do not: connect directly or through a session-mode pool for those"

// pooler looks for a pooler with the Backend's detector (pooler.Detect),
// asks whether it is in transaction mode, and probes a statement prepared
// on one connection while another holds a transaction, which such a pool
// may send to a session that never saw it.
func (d *deployment) pooler() {
	const rounds = 3
	ctx := d.ctx
	var conns [2]*sql.Conn
	for i := range conns {
		c, err := d.t.DB.Conn(ctx)
		if err != nil {
			d.poolerFailed(err)
			return
		}
		defer c.Close()
		conns[i] = c
	}
	a, b := conns[0], conns[1]
	v, err := pooler.Detect(ctx, a, d.t.Dialect, d.t.OneShot)
	var txMode bool
	var sessions, first int
	if err == nil {
		txMode, sessions, first, err = pooler.TransactionMode(ctx, a, b, d.t.OneShot, rounds)
	}
	if err != nil {
		d.poolerFailed(err)
		return
	}
	answered := ""
	if v.Pooler {
		answered = fmt.Sprintf("; a pooler answered for the server (the connection announced backend pid %d, its server session is pid %d): a Backend sends its statements unprepared", v.Announced, v.Session)
	}
	switch {
	case txMode:
		d.add("pooler", Warn,
			fmt.Sprintf("one client connection's statements ran in %d different server sessions, or shared one with another client connection: a pooler in transaction or statement mode (PgBouncer, pgcat, RDS Proxy, ...) is in the way", sessions)+answered,
			poolerFix)
	case v.Pooler:
		d.add("pooler", OK, "a pooler in session mode, as far as seen (one connection stayed in server session pid "+fmt.Sprint(first)+" while another held a transaction)"+answered, "")
	default:
		d.add("pooler", OK, fmt.Sprintf("no transaction-mode pooler seen (one connection stayed in server session pid %d while another held a transaction)", first), "")
	}

	if d.preparedFailed {
		return // failed already, in an earlier check
	}
	if d.t.NoPrepare {
		d.add("prepared statements", OK, "not used (Config.DisablePrepare)", "")
		return
	}
	st, err := a.PrepareContext(ctx, `SELECT pg_backend_pid()`)
	if err == nil {
		defer st.Close()
		for range rounds {
			if err = func() error {
				tx, err := b.BeginTx(ctx, nil)
				if err != nil {
					return err
				}
				defer tx.Rollback() //nolint:errcheck // read-only
				var p int64
				if err := pooler.QueryRow(ctx, pooler.Unprepared(tx, d.t.OneShot), `SELECT pg_backend_pid()`, nil, &p); err != nil {
					return err
				}
				return st.QueryRowContext(ctx).Scan(&p)
			}(); err != nil {
				break
			}
		}
	}
	if err != nil {
		detail, _ := d.describe(err)
		d.add("prepared statements", Fail, "a statement prepared on a connection failed there later: "+detail, preparedFix)
		return
	}
	d.add("prepared statements", OK, fmt.Sprintf("a prepared statement ran %d times on its connection", rounds), "")
}
