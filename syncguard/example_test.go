package syncguard_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"strings"
	"time"

	"github.com/syncguard/syncguard-go/syncguard"
)

func ExampleHashKey() {
	// Sanitized identifiers for logs: the same value any SyncGuard
	// implementation computes for this key.
	fmt.Println(syncguard.HashKey("test-key"))
	// Output: bb93bea4cb05bd4c690a29dc
}

func ExampleFence() {
	// Fences have a fixed width, so they compare as strings; the protected
	// resource keeps the largest it has seen and rejects smaller ones.
	older, newer := syncguard.Fence("000000000000042"), syncguard.Fence("000000000001000")
	n, _ := newer.Int64()
	fmt.Println(older < newer, n)
	// Output: true 1000
}

func ExampleSchemaSQL() {
	// The DDL for migration tools, with custom table names.
	ddl, err := syncguard.SchemaSQL(&syncguard.Config{TableName: "app_locks", FenceTableName: "app_fences"})
	if err != nil {
		log.Fatal(err)
	}
	funcs := 0
	for _, line := range strings.Split(ddl, "\n") {
		switch {
		case strings.HasPrefix(line, "DO $do$"):
			funcs++ // created when missing, named by a hash of the statement it runs
		case strings.HasPrefix(line, "CREATE"):
			fmt.Println(line)
		}
	}
	fmt.Println(funcs, "statement functions")
	// Output:
	// CREATE TABLE IF NOT EXISTS "app_locks" (
	// CREATE UNIQUE INDEX IF NOT EXISTS "idx_app_locks_lock_id" ON "app_locks" ("lock_id");
	// CREATE INDEX IF NOT EXISTS "idx_app_locks_expires" ON "app_locks" ("expires_at_ms");
	// CREATE TABLE IF NOT EXISTS "app_fences" (
	// CREATE UNLOGGED TABLE IF NOT EXISTS "app_locks_waiters" (
	// CREATE UNIQUE INDEX IF NOT EXISTS "idx_app_locks_wid" ON "app_locks_waiters" ("lock_id");
	// CREATE INDEX IF NOT EXISTS "idx_app_locks_wkey" ON "app_locks_waiters" ("key", "place", "lock_id");
	// CREATE TABLE IF NOT EXISTS "app_locks_holders" (
	// CREATE INDEX IF NOT EXISTS "idx_app_locks_hkey" ON "app_locks_holders" ("key");
	// 8 statement functions
}

func ExampleNew_invalidConfig() {
	_, err := syncguard.New(&sql.DB{}, &syncguard.Config{TableName: "locks", FenceTableName: "locks"})
	fmt.Println(errors.Is(err, syncguard.ErrInvalidArgument))
	// Output: true
}

// A single attempt at a lock, with the fence passed to the protected
// resource. Most programs use the retrying helper instead.
func ExampleBackend_Acquire() {
	var db *sql.DB // opened with a registered driver; see the package doc
	ctx := context.Background()
	locks, err := syncguard.New(db, nil)
	if err != nil {
		log.Fatal(err)
	}
	res, err := locks.Acquire(ctx, "payments:invoice:42", 30*time.Second)
	switch {
	case err != nil:
		log.Fatal(err) // a *syncguard.Error; errors.Is(err, syncguard.ErrServiceUnavailable) ...
	case !res.OK:
		fmt.Println("someone else is processing invoice 42")
		return
	}
	defer locks.Release(ctx, res.LockID)
	// Write with the fence, so a stale holder's late write is rejected:
	//   UPDATE invoices SET ..., fence = $1 WHERE id = 42 AND (fence IS NULL OR fence < $1)
	_ = res.Fence
}

// Taking a lock inside your own transaction: the lock row commits or rolls
// back with your writes.
func ExampleBackend_WithTx() {
	var db *sql.DB
	ctx := context.Background()
	locks, _ := syncguard.New(db, nil)
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback()
	res, err := locks.WithTx(tx).Acquire(ctx, "tenant:7:rebuild", time.Minute)
	if err != nil || !res.OK {
		return
	}
	// ... writes in tx ...
	if err := tx.Commit(); err != nil {
		log.Fatal(err)
	}
}

// Listing the live locks for an admin page: hashes only unless Raw, with
// the server's clock to judge expiry against.
func ExampleBackend_List() {
	var db *sql.DB // opened with a registered driver; see the package doc
	ctx := context.Background()
	locks, err := syncguard.New(db, nil)
	if err != nil {
		log.Fatal(err)
	}
	list, err := locks.List(ctx, &syncguard.ListOptions{Limit: 20})
	if err != nil {
		log.Fatal(err)
	}
	for _, l := range list.Locks {
		fmt.Printf("key#%s fence %s expires in %v\n", l.KeyHash, l.Fence, l.ExpiresAt.Sub(list.Now))
	}
	if list.More {
		fmt.Println("... and more")
	}
}
