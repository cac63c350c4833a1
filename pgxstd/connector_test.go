package pgxstd

import (
	"database/sql"
	"testing"

	"github.com/syncguard/syncguard-go/syncguard"
)

// A pool opened from NewConnector is pgx's stdlib driver underneath: the
// dialect is found without Config.Dialect. A malformed DSN fails at once.
func TestNewConnector(t *testing.T) {
	c, err := NewConnector("postgres://app@localhost:5432/app?connect_timeout=1")
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(c)
	defer db.Close()
	if _, err := syncguard.New(db, nil); err != nil {
		t.Fatalf("syncguard.New on a NewConnector pool: %v", err)
	}
	if _, err := NewConnector("postgres://u:p@localhost:badport/db"); err == nil {
		t.Fatal("NewConnector of a malformed DSN: want an error")
	}
}
