package downstream

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/DATA-DOG/go-sqlmock"

	"github.com/syncguard/syncguard-go/syncguard"
	"github.com/syncguard/syncguard-go/syncguardtest"
)

// Production passes its *syncguard.Backend as it is.
var _ = func(ctx context.Context, db *sql.DB, locks *syncguard.Backend) {
	_, _ = CreateOrder(ctx, db, locks, "o-1")
}

// TestCreateOrder: the transaction is go-sqlmock's, the locks
// syncguardtest's; no database. The fake's WithTx view acts at once and
// does not roll back: the test checks that the lock was taken inside the
// transaction (Call.Tx) and that the transaction then committed or rolled
// back.
func TestCreateOrder(t *testing.T) {
	ctx := context.Background()
	db, mock, err := sqlmock.New()
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	locks := syncguardtest.New()
	inTx := 0
	locks.SetHook(func(_ context.Context, c syncguardtest.Call) error {
		if c.Op == syncguardtest.OpAcquire && c.Tx != nil {
			inTx++
		}
		return nil
	})

	// The insert and the lock commit together.
	mock.ExpectBegin()
	mock.ExpectExec("INSERT INTO orders").WithArgs("o-1").WillReturnResult(sqlmock.NewResult(0, 1))
	mock.ExpectCommit()
	lockID, err := CreateOrder(ctx, db, locks, "o-1")
	if err != nil || lockID == "" {
		t.Fatalf("CreateOrder: %q, %v", lockID, err)
	}
	if inTx != 1 {
		t.Errorf("%d acquires inside the transaction, want 1", inTx)
	}
	if info, _ := locks.LookupID(ctx, lockID); info == nil {
		t.Error("the order's lock is not held")
	}

	// Another instance holds the order's lock: the transaction rolls back.
	if r, err := locks.Acquire(ctx, "order:o-2", time.Minute); err != nil || !r.OK {
		t.Fatal(r, err)
	}
	mock.ExpectBegin()
	mock.ExpectExec("INSERT INTO orders").WithArgs("o-2").WillReturnResult(sqlmock.NewResult(0, 1))
	mock.ExpectRollback()
	if _, err := CreateOrder(ctx, db, locks, "o-2"); !errors.Is(err, ErrOrderBusy) {
		t.Errorf("while another instance holds the lock: %v", err)
	}

	// The lock table cannot be reached: the transaction rolls back.
	locks.Fail(syncguardtest.OpAcquire, syncguard.ErrServiceUnavailable, 1)
	mock.ExpectBegin()
	mock.ExpectExec("INSERT INTO orders").WithArgs("o-3").WillReturnResult(sqlmock.NewResult(0, 1))
	mock.ExpectRollback()
	if _, err := CreateOrder(ctx, db, locks, "o-3"); !errors.Is(err, syncguard.ErrServiceUnavailable) {
		t.Errorf("with the lock table down: %v", err)
	}
	if err := mock.ExpectationsWereMet(); err != nil {
		t.Error(err)
	}
}
