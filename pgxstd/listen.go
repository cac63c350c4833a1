package pgxstd

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/syncguard/syncguard-go/driver"
)

var _ driver.Listener = dialect{}

// Listen implements driver.Listener. It borrows one of db's connections for
// a moment to copy its configuration (host, credentials, TLS, runtime
// parameters), then opens a separate pgx connection with it, outside db's
// pool, and runs LISTEN there.
func (dialect) Listen(ctx context.Context, db *sql.DB, channel string) (driver.NotifyConn, error) {
	cfg, err := connConfig(ctx, db)
	if err != nil {
		return nil, err
	}
	// A cancelled Wait must leave the connection usable: interrupt the read
	// with a deadline, never with a cancel request (which could hit a later
	// statement) and never by closing.
	cfg.BuildContextWatcherHandler = func(pc *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.DeadlineContextWatcherHandler{Conn: pc.Conn()}
	}
	// The copy carries the pooled connection's notification handler (pgx
	// sets it to that connection's buffer); ours buffers, bounded.
	n := &notifyConn{}
	cfg.OnNotification = func(_ *pgconn.PgConn, nt *pgconn.Notification) {
		n.queue.Push(driver.Notification{Channel: nt.Channel, Payload: nt.Payload})
	}
	c, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	n.c = c
	if _, err := c.PgConn().Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()).ReadAll(); err != nil {
		closeQuietly(c)
		return nil, err
	}
	return n, nil
}

// connConfig returns a copy of the configuration of one of db's
// connections.
func connConfig(ctx context.Context, db *sql.DB) (*pgx.ConnConfig, error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	var cfg *pgx.ConnConfig
	err = conn.Raw(func(dc any) error {
		sc, ok := dc.(*stdlib.Conn)
		if !ok {
			return fmt.Errorf("pgxstd: the pool's connections are %T, not *stdlib.Conn", dc)
		}
		cfg = sc.Conn().Config()
		return nil
	})
	return cfg, err
}

func closeQuietly(c *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = c.Close(ctx)
}

type notifyConn struct {
	c     *pgx.Conn
	queue driver.NotifyQueue
}

// Wait returns the next notification, with its channel, on any channel
// the connection listens on.
func (n *notifyConn) Wait(ctx context.Context) (driver.Notification, error) {
	for {
		if nt, ok := n.queue.Pop(); ok {
			return nt, nil
		}
		if err := n.c.PgConn().WaitForNotification(ctx); err != nil {
			return driver.Notification{}, err
		}
	}
}

func (n *notifyConn) Ping(ctx context.Context) error { return n.c.Ping(ctx) }

func (n *notifyConn) Exec(ctx context.Context, sql string) error {
	_, err := n.c.PgConn().Exec(ctx, sql).ReadAll()
	return err
}

func (n *notifyConn) Close() error {
	closeQuietly(n.c)
	return nil
}
