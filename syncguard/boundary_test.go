package syncguard

import (
	"context"
	"testing"

	"github.com/DATA-DOG/go-sqlmock"
)

// A full notification queue fails the commit of any transaction that
// notifies (54000, at commit): the release is run again without wake-ups
// and commits, handing the key over all the same (the waiter finds it at
// its next attempt).
func TestReleaseCommitsWhenTheNotificationQueueIsFull(t *testing.T) {
	b, mock := newMock(t, &Config{DisablePrepare: true})
	rc := []string{"lock_id", "seen", "now", "woke", "woke_channel", "left_queue"}
	mock.ExpectQuery("DELETE FROM").WithArgs(goodID, true, true, sqlmock.AnyArg()).
		WillReturnError(&pgErr{code: "54000"})
	mock.ExpectQuery("DELETE FROM").WithArgs(goodID, true, false, sqlmock.AnyArg()).
		WillReturnRows(sqlmock.NewRows(rc).AddRow(goodID, int64(5000), int64(1000), "0123456789abcdef", "ch", false))
	got, err := b.Release(context.Background(), goodID)
	if err != nil || !got.OK {
		t.Fatalf("release with a full notification queue: got %+v, %v; want it done", got, err)
	}
	if err := mock.ExpectationsWereMet(); err != nil {
		t.Fatal(err)
	}
}

// Inside the caller's transaction the statement is not re-run: the
// error is the caller's (its transaction is aborted).
func TestReleaseInTxDoesNotRerunOnFullQueue(t *testing.T) {
	b, mock := newMock(t, &Config{DisablePrepare: true})
	mock.ExpectBegin()
	mock.ExpectQuery("DELETE FROM").WithArgs(goodID, false, true, sqlmock.AnyArg()).WillReturnError(&pgErr{code: "54000"})
	tx, err := b.shared.db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.WithTx(tx).Release(context.Background(), goodID); err == nil {
		t.Fatal("release in a transaction whose statement failed: want the error")
	}
	if err := mock.ExpectationsWereMet(); err != nil {
		t.Fatal(err)
	}
}
