package txguard_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"strings"

	"github.com/syncguard/syncguard-go/multilock"
	"github.com/syncguard/syncguard-go/syncguard"
	"github.com/syncguard/syncguard-go/txguard"
)

// A job writes under a lease: its writes commit only while the lease
// holds, and a takeover of the key waits for the transaction. The same
// flow runs against PostgreSQL in tests/itest (TestTxGuardExampleFlow).
func ExampleGuard_HoldLease() {
	var db *sql.DB // opened with a registered driver; see syncguard's package doc
	ctx := context.Background()
	locks, err := syncguard.New(db, nil)
	if err != nil {
		log.Fatal(err)
	}
	guard, err := txguard.New(db, nil)
	if err != nil {
		log.Fatal(err)
	}
	err = syncguard.WithLock(ctx, locks, "invoice:42", func(ctx context.Context, lease *syncguard.Lease) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		held, err := guard.HoldLease(ctx, tx, lease) // first, before the transaction's other row locks
		if err != nil {
			return err // errors.Is(err, syncguard.ErrLockLost): nothing was written
		}
		if _, err := tx.ExecContext(ctx, `UPDATE invoices SET state = 'sent', fence = $1 WHERE id = 42`, string(held.Fence)); err != nil {
			return guard.Classify(ctx, err) // a fence guard's rejection: errors.Is(err, txguard.ErrStaleFence)
		}
		return tx.Commit()
	}, nil)
	if errors.Is(err, syncguard.ErrLockLost) {
		fmt.Println("the lease was lost; nothing was written")
	}
}

// A money transfer: both accounts locked at once (multilock), one
// transaction that checks the whole set first and writes each account
// with its own key's fence. Example_txguardTransfer in tests/itest runs
// this against PostgreSQL, with its output.
func ExampleGuard_HoldLease_transfer() {
	var db *sql.DB // opened with a registered driver; see syncguard's package doc
	ctx := context.Background()
	locks, err := multilock.New(db, nil)
	if err != nil {
		log.Fatal(err)
	}
	guard, err := txguard.New(db, nil)
	if err != nil {
		log.Fatal(err)
	}
	err = multilock.WithLock(ctx, locks, []string{"acct:alice", "acct:bob"}, func(ctx context.Context, set *multilock.Lease) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		held, err := guard.HoldLease(ctx, tx, set) // every key's lock row, until the transaction ends
		if err != nil {
			return err // errors.Is(err, syncguard.ErrLockLost): nothing was written
		}
		for _, f := range held.Fences {
			delta := map[string]int{"acct:alice": -30, "acct:bob": 30}[f.Key]
			if _, err := tx.ExecContext(ctx, `UPDATE accounts SET balance = balance + $1, fence = $2 WHERE id = $3`,
				delta, string(f.Fence), f.Key); err != nil {
				return guard.Classify(ctx, err)
			}
		}
		return tx.Commit()
	}, nil)
	if err != nil {
		log.Print(err)
	}
}

// The SQL functions that Setup creates, one per kind of lock, check the
// lease inside the caller's own statement, here one that sets the fence
// column from it (a multilock set's function takes the key whose fence it
// returns, and checks the whole set).
func ExampleSchemaSQL() {
	ddl, err := txguard.SchemaSQL(&syncguard.Config{TableName: "app_locks"})
	if err != nil {
		log.Fatal(err)
	}
	for _, line := range strings.Split(ddl, "\n") {
		if strings.HasPrefix(line, "CREATE") {
			fmt.Println(line)
		}
	}
	fmt.Println(`UPDATE invoices SET state = 'sent', fence = "app_locks_hold"($1, $2) WHERE id = 42`)
	fmt.Println(`UPDATE accounts SET balance = balance - 10, fence = "app_locks_ml_hold"($1, 'acct:alice') WHERE id = 'alice'`)
	// Output:
	// CREATE OR REPLACE FUNCTION "app_locks_hold"(p_lock_id text, p_key text) RETURNS bigint
	// CREATE OR REPLACE FUNCTION "app_locks_sem_hold"(p_lock_id text) RETURNS bigint
	// CREATE OR REPLACE FUNCTION "app_locks_rw_hold"(p_lock_id text) RETURNS bigint
	// CREATE OR REPLACE FUNCTION "app_locks_ml_hold"(p_lock_id text, p_key text) RETURNS bigint
	// UPDATE invoices SET state = 'sent', fence = "app_locks_hold"($1, $2) WHERE id = 42
	// UPDATE accounts SET balance = balance - 10, fence = "app_locks_ml_hold"($1, 'acct:alice') WHERE id = 'alice'
}

// Names go into DDL quoted, and only plain identifiers are accepted:
// anything else is InvalidArgument before any I/O.
func ExampleFenceGuardSQL() {
	_, err := txguard.FenceGuardSQL("billing.invoices", "fence; DROP TABLE x")
	fmt.Println(syncguard.CodeOf(err))
	ddl, _ := txguard.FenceGuardSQL("billing.invoices", "fence")
	for _, line := range strings.Split(ddl, "\n") {
		if strings.HasPrefix(line, "CREATE") {
			fmt.Println(line)
		}
	}
	// Output:
	// InvalidArgument
	// CREATE OR REPLACE FUNCTION "billing"."invoices_fence_guard"() RETURNS trigger
	// CREATE TRIGGER "syncguard_fence_guard" BEFORE UPDATE ON "billing"."invoices"
}
