package sgbench

import (
	"context"
	"database/sql"
	"strings"

	"github.com/syncguard/syncguard-go/driver"
)

// VarNoGrant is VarNotify without grant notifications (the ablation of
// docs/design.md's "grant notification"): its LISTEN connection passes on
// a grant's first field only, so a waiter handed the key reads its
// row with an attempt, as before grants. A Backend's local wake-up of its
// own waiter still carries the grant (W6's processes have one worker).
const VarNoGrant = "syncguard without grant notifications (ablation)"

// plainWakeDialect strips what follows a payload's first field.
type plainWakeDialect struct {
	fwdDialect
	l driver.Listener
}

func (d plainWakeDialect) Listen(ctx context.Context, db *sql.DB, channel string) (driver.NotifyConn, error) {
	c, err := d.l.Listen(ctx, db, channel)
	if err != nil {
		return nil, err
	}
	return plainWakeConn{c}, nil
}

type plainWakeConn struct{ driver.NotifyConn }

func (c plainWakeConn) Wait(ctx context.Context) (driver.Notification, error) {
	n, err := c.NotifyConn.Wait(ctx)
	if f := strings.Split(n.Payload, ":"); len(f) == 5 && len(f[0]) == 16 {
		n.Payload = f[0] // a grant (not the probe, "syncguard:probe:...")
	}
	return n, err
}
