package itest_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/syncguard/syncguard-go/driver"
	sgpq "github.com/syncguard/syncguard-go/pq"
	"github.com/syncguard/syncguard-go/syncguard"
	"github.com/syncguard/syncguard-go/tests/pgtest"
)

// A lib/pq pool opened with sgpq.NewConnector(dsn) needs the DSN once: the
// dialect syncguard.New finds for it opens a LISTEN connection that
// receives what the pool notifies, and the Backend's notifications are
// active, with no Config.Dialect.
func TestPQConnectorListens(t *testing.T) {
	srv := pgtest.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dsn, err := srv.CreateDatabase(ctx, "pq_connector")
	if err != nil {
		t.Fatal(err)
	}
	c, err := sgpq.NewConnector(dsn)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(c)
	defer db.Close()

	d, ok := driver.Lookup(db.Driver())
	if !ok {
		t.Fatalf("no dialect for %T", db.Driver())
	}
	lst, ok := d.(driver.Listener)
	if !ok {
		t.Fatalf("the dialect %q of a NewConnector pool cannot LISTEN", d.Name())
	}
	nc, err := lst.Listen(ctx, db, "pq connector test")
	if err != nil {
		t.Fatalf("Listen: %v", err)
	}
	defer nc.Close()
	if _, err := db.ExecContext(ctx, `SELECT pg_notify('pq connector test', 'hello')`); err != nil {
		t.Fatal(err)
	}
	if n, err := nc.Wait(ctx); err != nil || n != (driver.Notification{Channel: "pq connector test", Payload: "hello"}) {
		t.Fatalf("Wait: %+v, %v; want the pool's notification, with its channel", n, err)
	}

	if err := syncguard.SetupSchema(ctx, db, nil); err != nil {
		t.Fatal(err)
	}
	locks, err := syncguard.New(db, nil)
	if err != nil {
		t.Fatal(err)
	}
	if st := locks.NotificationStatus(ctx); !st.Active {
		t.Fatalf("a Backend on a NewConnector pool, no Config.Dialect: notifications %+v, want active", st)
	}
	r, err := locks.Acquire(ctx, "pq:connector", time.Minute)
	if err != nil || !r.OK {
		t.Fatalf("acquire on a NewConnector pool: %+v, %v", r, err)
	}
	if rel, err := locks.Release(ctx, r.LockID); err != nil || !rel.OK {
		t.Fatalf("release: %+v, %v", rel, err)
	}
}
