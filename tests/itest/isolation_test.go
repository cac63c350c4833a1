package itest_test

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/syncguard/syncguard-go/conformance"
	"github.com/syncguard/syncguard-go/tests/pgtest"
	"github.com/syncguard/syncguard-go/tests/pgtest/suite"
)

// isolationGroups are the conformance groups whose answers must not depend
// on the session's default isolation (WithTx cases are left out: there the
// caller's transaction, and its isolation, are the caller's).
var isolationGroups = []string{"Isolation", "Races", "MutualExclusion", "Fences", "Ownership", "Lifecycle", "Contention"}

// TestIsolationDefaults runs the pool-path conformance groups with
// default_transaction_isolation set the three ways a deployment sets it:
// in the DSN (a startup parameter), on the database, and on the role (in
// that database). The Isolation group's own cases set it per session.
func TestIsolationDefaults(t *testing.T) {
	srv := pgtest.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	admin, err := sql.Open("pgx", srv.DSN)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close() })
	setup := func(dbname, stmt string) string {
		t.Helper()
		dsn, err := srv.CreateDatabase(ctx, dbname)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := admin.ExecContext(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
		return dsn
	}
	byDatabase := setup("sg_iso_db_rr", `ALTER DATABASE sg_iso_db_rr SET default_transaction_isolation = 'repeatable read'`)
	byRole := setup("sg_iso_role_ser", `ALTER ROLE CURRENT_USER IN DATABASE sg_iso_role_ser SET default_transaction_isolation = 'serializable'`)
	sep := "?"
	if strings.Contains(srv.DSN, "?") {
		sep = "&"
	}
	if !strings.Contains(srv.DSN, "://") {
		t.Skip("the DSN-parameter run needs a URL DSN")
	}
	byDSN := srv.DSN + sep + "default_transaction_isolation=serializable"

	for _, c := range []struct {
		name, level, dsn string
		d                suite.Driver
	}{
		{"DSNSerializable/PQ", "serializable", byDSN, pqDriver},
		{"DSNSerializable/PGX", "serializable", byDSN, pgxDriver},
		{"DatabaseRepeatableRead/PGX", "repeatable read", byDatabase, pgxDriver},
		{"RoleSerializable/PQ", "serializable", byRole, pqDriver},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			open := conformance.Opener(c.d.Name, c.dsn)
			db := open(t)
			var got string
			if err := db.QueryRowContext(ctx, "SHOW transaction_isolation").Scan(&got); err != nil || got != c.level {
				t.Fatalf("setup: sessions of this pool run at %q (%v), want %q", got, err, c.level)
			}
			conformance.Run(t, conformance.Harness{Open: open, Dialect: c.d.Dialect, Groups: isolationGroups})
		})
	}
}
