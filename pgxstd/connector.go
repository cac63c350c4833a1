package pgxstd

import (
	sqldriver "database/sql/driver"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/stdlib"
)

// NewConnector returns a connector for dsn; open the pool with
// sql.OpenDB(connector). It is sql.Open("pgx", dsn) with one difference:
// when a statement's context ends while the statement is out, its
// connection asks the server to cancel the statement and waits for the
// answer (up to a second), as lib/pq does, instead of closing the
// connection at once. Where contexts often end mid-statement (Lock with
// timeouts of a few milliseconds, many waiters giving up), the pool then
// keeps its connections instead of opening, and authenticating, a new one
// for each cut statement (measured in docs/failure-model.md, "Adversaries").
// A malformed dsn fails here, as pgx.ParseConfig reports it.
func NewConnector(dsn string) (sqldriver.Connector, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	cfg.BuildContextWatcherHandler = func(c *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.CancelRequestContextWatcherHandler{Conn: c, DeadlineDelay: time.Second}
	}
	return stdlib.GetConnector(*cfg), nil
}
