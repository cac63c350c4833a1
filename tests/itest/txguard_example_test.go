package itest_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"math/rand/v2"

	"github.com/syncguard/syncguard-go/multilock"
	"github.com/syncguard/syncguard-go/syncguard"
	"github.com/syncguard/syncguard-go/tests/pgtest"
	"github.com/syncguard/syncguard-go/txguard"
)

// A money transfer on PostgreSQL: multilock.WithLock takes both accounts
// at once, and one transaction checks the whole set with txguard before
// it moves the money, so that its writes commit only while the set is
// held, and before any takeover of either account. Each account row
// keeps its own key's fence, under a fence guard. (It runs against the
// test server; docs/txguard.md shows the same code.)
func Example_txguardTransfer() {
	db, err := sql.Open("pgx", pgtest.Get().DSN) // a *sql.DB of a registered driver
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	cfg := &syncguard.Config{TableName: fmt.Sprintf("ex_%08x", rand.Uint32())} // nil: the default tables
	accounts := cfg.TableName + "_accounts"
	defer dropPrefixed(db, cfg.TableName)

	// Once, at deployment: multilock's tables, txguard's SQL functions,
	// the resource table and its fence guard.
	if err := multilock.SetupSchema(ctx, db, cfg); err != nil {
		log.Fatal(err)
	}
	if err := txguard.Setup(ctx, db, cfg); err != nil {
		log.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE `+accounts+` (id text PRIMARY KEY, balance bigint NOT NULL, fence bigint);
		INSERT INTO `+accounts+` VALUES ('alice', 100, NULL), ('bob', 0, NULL)`); err != nil {
		log.Fatal(err)
	}
	if err := txguard.SetupFenceGuard(ctx, db, accounts, "fence"); err != nil {
		log.Fatal(err)
	}

	locks, err := multilock.New(db, cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close()
	guard, err := txguard.New(db, cfg)
	if err != nil {
		log.Fatal(err)
	}
	transfer := func(from, to string, amount int) error {
		return multilock.WithLock(ctx, locks, []string{"acct:" + from, "acct:" + to}, func(ctx context.Context, set *multilock.Lease) error {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			defer tx.Rollback()
			// First in the transaction: both accounts' lock rows, held until it ends.
			held, err := guard.HoldLease(ctx, tx, set)
			if err != nil {
				return err // errors.Is(err, syncguard.ErrLockLost): nothing was written
			}
			for _, f := range held.Fences { // each account with its own key's fence
				id, delta := f.Key[len("acct:"):], amount
				if id == from {
					delta = -amount
				}
				n, _ := f.Fence.Int64()
				if _, err := tx.ExecContext(ctx, `UPDATE `+accounts+` SET balance = balance + $1, fence = $2 WHERE id = $3`, delta, n, id); err != nil {
					return guard.Classify(ctx, err) // a stale fence: errors.Is(err, txguard.ErrStaleFence)
				}
			}
			return tx.Commit()
		}, nil)
	}
	fmt.Println(transfer("alice", "bob", 30))
	fmt.Println(transfer("bob", "alice", 5))

	rows, err := db.QueryContext(ctx, `SELECT id, balance, fence FROM `+accounts+` ORDER BY id`)
	if err != nil {
		log.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			id             string
			balance, fence int64
		)
		if err := rows.Scan(&id, &balance, &fence); err != nil {
			log.Fatal(err)
		}
		fmt.Println(id, balance, "fence", fence)
	}
	// Output:
	// <nil>
	// <nil>
	// alice 75 fence 2
	// bob 25 fence 2
}
