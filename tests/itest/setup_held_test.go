package itest_test

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/syncguard/syncguard-go/multilock"
	"github.com/syncguard/syncguard-go/rwlock"
	"github.com/syncguard/syncguard-go/semaphore"
	"github.com/syncguard/syncguard-go/syncguard"
	"github.com/syncguard/syncguard-go/tests/pgtest"
	"github.com/syncguard/syncguard-go/txguard"
)

// TestSetupWithTheSetupIDsHeld: an outsider holds every setup's advisory
// id. Setup of what exists returns at once, for every kind (the existence
// query, not the lock); a setup that must create waits at most its
// lock_timeout (here the caller's shorter deadline) and says who holds the
// id: the outsider's pid (issue 41).
func TestSetupWithTheSetupIDsHeld(t *testing.T) {
	srv := pgtest.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dsn, err := srv.CreateDatabase(ctx, "setup_held")
	if err != nil {
		t.Fatal(err)
	}
	db := open(t, dsn)
	setups := map[string]func(context.Context, *sql.DB, *syncguard.Config) error{
		"mutex": syncguard.SetupSchema, "semaphore": semaphore.SetupSchema, "rwlock": rwlock.SetupSchema,
		"multilock": multilock.SetupSchema, "txguard": txguard.Setup,
	}
	for name, setup := range setups {
		if err := setup(ctx, db, nil); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	// txguard's functions to create need a lock table.
	if err := syncguard.SetupSchema(ctx, db, &syncguard.Config{TableName: "held_txguard"}); err != nil {
		t.Fatal(err)
	}
	outsider, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer outsider.Close()
	var pid int
	if err := outsider.QueryRowContext(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	for _, id := range []int64{0x73796e6367756172, 0x73656d6170686f72, 0x72776c6f636b3031, 0x6d756c74696c6b31, 0x7478677561726431} {
		if _, err := outsider.ExecContext(ctx, fmt.Sprintf(`SELECT pg_advisory_lock(%d)`, id)); err != nil {
			t.Fatal(err)
		}
	}
	for name, setup := range setups {
		t.Run(name, func(t *testing.T) {
			// Existing: no wait for the id (a wait would last the whole 20 s).
			sctx, scancel := context.WithTimeout(ctx, 20*time.Second)
			defer scancel()
			if err := setup(sctx, db, nil); err != nil {
				t.Errorf("rule: setup of existing objects returns whoever holds the id: %v", err)
			}
			// To create: bounded, and the error names the holder.
			cctx, ccancel := context.WithTimeout(ctx, 2*time.Second)
			defer ccancel()
			cfg := &syncguard.Config{TableName: "held_" + name}
			err := setup(cctx, db, cfg)
			if err == nil {
				t.Fatal("created with the setup's id held")
			}
			if !strings.Contains(err.Error(), fmt.Sprintf("pid %d", pid)) {
				t.Errorf("rule: a setup that could not get its id says who holds it (pid %d): %v", pid, err)
			}
			t.Log(err)
		})
	}
}
