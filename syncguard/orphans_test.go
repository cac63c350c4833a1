package syncguard

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/DATA-DOG/go-sqlmock"

	"github.com/syncguard/syncguard-go/internal/rules"
)

// waitIdle waits until the Backend's background release has nothing
// pending and its worker has exited; 10 s is far beyond any schedule here.
func waitIdle(t *testing.T, s *shared) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		if s.orphans.idle() {
			return
		}
	}
	t.Fatal("the background release did not finish")
}

// Lock ids of acquires with an unknown outcome are released in batches,
// one statement for all that are due, by one worker that exits when done.
func TestBackgroundReleaseBatches(t *testing.T) {
	b, mock := newMock(t, nil)
	ids := []string{rules.GenerateLockID(), rules.GenerateLockID(), rules.GenerateLockID()}
	// Held up by the first statement, the three ids are released together.
	mock.ExpectQuery("DELETE FROM").WithArgs(ids[0]).WillDelayFor(100 * time.Millisecond).
		WillReturnRows(sqlmock.NewRows([]string{"d"}).AddRow(ids[0]))
	mock.ExpectQuery("DELETE FROM").WithArgs(ids[1] + "," + ids[2]).
		WillReturnRows(sqlmock.NewRows([]string{"d"}).AddRow(ids[1] + "," + ids[2]))
	b.shared.releaseInBackground(ids[0], time.Minute)
	time.Sleep(20 * time.Millisecond)
	b.shared.releaseInBackground(ids[1], time.Minute)
	b.shared.releaseInBackground(ids[2], time.Minute)
	waitIdle(t, b.shared)
	if err := mock.ExpectationsWereMet(); err != nil {
		t.Fatal(err)
	}
}

// A lockId not found may belong to an acquire that commits later: it is
// tried again, and released once found.
func TestBackgroundReleaseRetriesNotFound(t *testing.T) {
	b, mock := newMock(t, nil)
	id := rules.GenerateLockID()
	mock.ExpectQuery("DELETE FROM").WithArgs(id).WillReturnRows(sqlmock.NewRows([]string{"d"}).AddRow(""))
	mock.ExpectQuery("DELETE FROM").WithArgs(id).WillReturnRows(sqlmock.NewRows([]string{"d"}).AddRow(""))
	mock.ExpectQuery("DELETE FROM").WithArgs(id).WillReturnRows(sqlmock.NewRows([]string{"d"}).AddRow(id))
	b.shared.releaseInBackground(id, time.Minute)
	waitIdle(t, b.shared)
	if err := mock.ExpectationsWereMet(); err != nil {
		t.Fatal(err)
	}
}

// An acquire that timed out waiting for a pool connection never sent its
// statement: it starts no background release (no goroutine, no statement).
func TestPoolWaitTimeoutStartsNoBackgroundRelease(t *testing.T) {
	b, mock := newMock(t, nil)
	db := b.shared.db
	db.SetMaxOpenConns(1)
	hold, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Close()
	before := runtime.NumGoroutine()
	for range 50 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
		_, err := b.Acquire(ctx, "k", time.Minute)
		cancel()
		wantCode(t, err, ErrNetworkTimeout)
	}
	n, running := b.shared.orphans.pendingCount(), !b.shared.orphans.idle()
	if n != 0 || running {
		t.Fatalf("acquires that never left the pool queued %d background releases (worker running %v)", n, running)
	}
	if g := runtime.NumGoroutine(); g > before+5 {
		t.Errorf("goroutines went from %d to %d", before, g)
	}
	if err := mock.ExpectationsWereMet(); err != nil {
		t.Fatal(err)
	}
}

// An acquire whose statement went out and whose context ended before the
// answer does queue its lockId.
func TestCancelledAfterSendQueuesBackgroundRelease(t *testing.T) {
	b, mock := newMock(t, nil)
	mock.ExpectQuery("INSERT INTO").WillDelayFor(time.Second).WillReturnRows(sqlmock.NewRows([]string{"a"}))
	mock.ExpectQuery("DELETE FROM").WillReturnRows(sqlmock.NewRows([]string{"d"}).AddRow(""))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, err := b.Acquire(ctx, "k", 300*time.Millisecond)
	wantCode(t, err, ErrNetworkTimeout)
	n := b.shared.orphans.pendingCount()
	if n != 1 {
		t.Fatalf("want the lockId queued for release, got %d pending", n)
	}
	waitIdle(t, b.shared) // gives up at the lock's expiry (300 ms + 1 s)
}

// idle reports whether nothing is pending and no worker runs.
func (q *orphanQueue) idle() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return !q.running && len(q.pending) == 0
}

// pendingCount is how many lockIds wait.
func (q *orphanQueue) pendingCount() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.pending)
}

// Without the waiters table (or with one of an older version) the
// background release sends its variant without the queue, at once and
// from then on.
func TestBackgroundReleaseWithoutTheWaitersTable(t *testing.T) {
	b, mock := newMock(t, nil)
	ids := []string{rules.GenerateLockID(), rules.GenerateLockID()}
	mock.ExpectQuery(`"syncguard_locks_waiters"`).WithArgs(ids[0]).
		WillReturnError(&pgErr{code: "42703", msg: `column q.near does not exist`})
	mock.ExpectQuery("!_waiters").WithArgs(ids[0]).WillReturnRows(sqlmock.NewRows([]string{"d"}).AddRow(ids[0]))
	mock.ExpectQuery("!_waiters").WithArgs(ids[1]).WillReturnRows(sqlmock.NewRows([]string{"d"}).AddRow(ids[1]))
	b.shared.releaseInBackground(ids[0], time.Minute)
	waitIdle(t, b.shared)
	b.shared.releaseInBackground(ids[1], time.Minute)
	waitIdle(t, b.shared)
	if err := mock.ExpectationsWereMet(); err != nil {
		t.Fatal(err)
	}
	if !b.shared.noQueue.Load() {
		t.Error("the Backend must go on without the queue")
	}
}
