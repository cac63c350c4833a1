package itest_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/syncguard/syncguard-go/driver"
	"github.com/syncguard/syncguard-go/pgxstd"
	sgpq "github.com/syncguard/syncguard-go/pq"
	"github.com/syncguard/syncguard-go/tests/pgtest"
)

// TestNotifyConnNamesTheChannel: each adapter's LISTEN connection returns
// every notification with the channel it was sent on, for the channel
// Listen opened it with and for one LISTENed later through Exec, names
// that need quoting included, in the order they were committed.
func TestNotifyConnNamesTheChannel(t *testing.T) {
	srv := pgtest.Require(t)
	for _, tc := range []struct {
		name    string
		driver  string
		dialect driver.Dialect
	}{
		{"pq", "postgres", sgpq.ListenDialect(srv.DSN)},
		{"pgx", "pgx", pgxstd.Dialect},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			db, err := sql.Open(tc.driver, srv.DSN)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			first, second := `notify "first" `+tc.name, "notify:second:"+tc.name
			nc, err := tc.dialect.(driver.Listener).Listen(ctx, db, first)
			if err != nil {
				t.Fatalf("Listen: %v", err)
			}
			defer nc.Close()
			if err := nc.Exec(ctx, `LISTEN "`+second+`"`); err != nil {
				t.Fatalf("LISTEN through Exec: %v", err)
			}
			want := []driver.Notification{{Channel: first, Payload: "one"}, {Channel: second, Payload: "one"}, {Channel: first, Payload: ""}}
			for _, n := range want {
				if _, err := db.ExecContext(ctx, `SELECT pg_notify($1, $2)`, n.Channel, n.Payload); err != nil {
					t.Fatal(err)
				}
			}
			for _, w := range want {
				if n, err := nc.Wait(ctx); err != nil || n != w {
					t.Fatalf("rule: Wait returns each notification with its channel, in order; got %+v, %v, want %+v", n, err, w)
				}
			}
		})
	}
}
