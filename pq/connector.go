package pq

import (
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	"fmt"

	"github.com/lib/pq"

	"github.com/syncguard/syncguard-go/driver"
)

func init() {
	driver.Register(&connectorDriver{}, connectorDialect{})
}

// Connector is lib/pq's connector for a DSN, for sql.OpenDB, which also
// tells syncguard that DSN: give the DSN once and waiting is woken on
// release.
//
//	connector, err := sgpq.NewConnector(dsn)
//	if err != nil { ... }
//	db := sql.OpenDB(connector)
//	locks, err := syncguard.New(db, nil)
//
// syncguard.New finds, from db.Driver(), the dialect of ListenDialect(dsn)
// without Config.Dialect: callers of syncguard.Lock and WithLock waiting
// for a contended key are woken the moment it is released, through one
// LISTEN connection per Backend (a pq.ListenerConn opened with the DSN,
// outside the pool, with lib/pq's default dialer). A pool from
// sql.Open("postgres", dsn) gets the plain Dialect, which cannot learn the
// DSN, and waiting polls.
//
// Connector embeds lib/pq's *pq.Connector, whose methods it has: set a
// Dialer (DeadlineDialer, say) on it as on lib/pq's own, before
// sql.OpenDB.
type Connector struct {
	*pq.Connector
	drv *connectorDriver
}

// NewConnector parses dsn (a URL or key=value pairs, as lib/pq's
// NewConnector, which reads the PG* environment variables too) and returns
// its Connector.
func NewConnector(dsn string) (*Connector, error) {
	c, err := pq.NewConnector(dsn)
	if err != nil {
		return nil, err
	}
	return &Connector{Connector: c, drv: &connectorDriver{dsn: dsn}}, nil
}

// Driver implements database/sql/driver.Connector: lib/pq's driver, as a
// type of its own that carries the DSN, which is how syncguard.New finds
// the listening dialect for the pool (db.Driver() of sql.OpenDB(c) is
// c.Driver()).
func (c *Connector) Driver() sqldriver.Driver { return c.drv }

// connectorDriver is lib/pq's driver, remembering the DSN of the
// Connector it came from.
type connectorDriver struct{ dsn string }

// Open opens a connection with lib/pq's driver.
func (d *connectorDriver) Open(name string) (sqldriver.Conn, error) { return pq.Driver{}.Open(name) }

// connectorDialect is ListenDialect's, for pools opened with a Connector:
// it reads the DSN from the pool's driver.
type connectorDialect struct{ dialect }

var _ driver.Listener = connectorDialect{}

// Listen implements driver.Listener as ListenDialect(dsn) does, with the
// DSN of the Connector db was opened with.
func (connectorDialect) Listen(ctx context.Context, db *sql.DB, channel string) (driver.NotifyConn, error) {
	d, ok := db.Driver().(*connectorDriver)
	if !ok {
		return nil, fmt.Errorf("syncguard/pq: the pool's driver is %T, not a pq.NewConnector's: use Config.Dialect: pq.ListenDialect(dsn)", db.Driver())
	}
	return listenDialect{dsn: d.dsn}.Listen(ctx, db, channel)
}
