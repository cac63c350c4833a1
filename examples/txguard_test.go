package examples

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/syncguard/syncguard-go/syncguard"
	"github.com/syncguard/syncguard-go/tests/pgtest"
	"github.com/syncguard/syncguard-go/txguard"
)

// TestTxGuardORMExamples: txguard's Hold takes each ORM's transaction as
// WithTx does (GORM's tx.Statement.ConnPool with PrepareStmt off and on, a
// *sqlx.Tx), writes with the held fence while the lease holds, and fails
// with ErrLockLost, writing nothing, once the lease is gone.
func TestTxGuardORMExamples(t *testing.T) {
	srv := pgtest.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dsn, err := srv.CreateDatabase(ctx, "examples_txguard")
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, `CREATE TABLE invoices (id bigint PRIMARY KEY, status text NOT NULL, fence text)`); err != nil {
		t.Fatal(err)
	}
	if err := syncguard.SetupSchema(ctx, db, nil); err != nil {
		t.Fatal(err)
	}
	locks, err := syncguard.New(db, nil)
	if err != nil {
		t.Fatal(err)
	}
	guard, err := txguard.New(db, nil)
	if err != nil {
		t.Fatal(err)
	}
	type closeFn func(ctx context.Context, lease txguard.Lease, id int64) error
	cases := []struct {
		name  string
		close closeFn
	}{
		{"gorm", func(ctx context.Context, lease txguard.Lease, id int64) error {
			return GORMCloseGuarded(ctx, gormOn(t, db, false), guard, lease, id)
		}},
		{"gorm_prepared", func(ctx context.Context, lease txguard.Lease, id int64) error {
			return GORMCloseGuarded(ctx, gormOn(t, db, true), guard, lease, id)
		}},
		{"sqlx", func(ctx context.Context, lease txguard.Lease, id int64) error {
			return SqlxCloseGuarded(ctx, sqlx.NewDb(db, "pgx"), guard, lease, id)
		}},
	}
	for i, c := range cases {
		id := int64(10 + i)
		if _, err := db.ExecContext(ctx, `INSERT INTO invoices (id, status) VALUES ($1, 'open')`, id); err != nil {
			t.Fatal(err)
		}
		var fence syncguard.Fence
		err := syncguard.WithLock(ctx, locks, lockKey(id), func(ctx context.Context, lease *syncguard.Lease) error {
			fence = lease.Fence()
			if err := c.close(ctx, lease, id); err != nil {
				return err
			}
			// The lease released behind its back: Hold finds it gone.
			if _, err := locks.Release(ctx, lease.LockID()); err != nil {
				return err
			}
			if _, err := db.ExecContext(ctx, `UPDATE invoices SET status = 'open' WHERE id = $1`, id); err != nil {
				return err
			}
			if err := c.close(ctx, lease, id); !errors.Is(err, syncguard.ErrLockLost) {
				t.Errorf("%s: a guarded write after the lease was released: %v, want ErrLockLost", c.name, err)
			}
			return nil
		}, nil)
		if err != nil && !errors.Is(err, syncguard.ErrLockLost) {
			t.Fatalf("%s: %v", c.name, err)
		}
		var status, got string
		if err := db.QueryRowContext(ctx, `SELECT status, fence FROM invoices WHERE id = $1`, id).Scan(&status, &got); err != nil {
			t.Fatal(err)
		}
		if status != "open" || got != string(fence) {
			t.Errorf("%s: invoice after a guarded write and a refused one: status %q fence %q, want open with %q", c.name, status, got, fence)
		}
	}
}
