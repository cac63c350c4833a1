package syncguard

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/DATA-DOG/go-sqlmock"

	"github.com/syncguard/syncguard-go/internal/rules"
)

var listCols = []string{"now_ms", "user_key", "lock_id", "fence", "acquired_at_ms", "expires_at_ms", "identity"}

func TestListShapesTheAnswer(t *testing.T) {
	b, mock := newMock(t, nil)
	ctx := context.Background()
	const now = 100_000
	// Default options: live only, limit 100 (101 asked for), hashes only.
	mock.ExpectQuery(`FROM "syncguard_locks" AS l`).WithArgs(false, int64(101)).WillReturnRows(
		sqlmock.NewRows(listCols).
			AddRow(now, "b", goodID, "000000000000002", now-10, now+5000, "host-b:7").
			AddRow(now, "a", "BBBBBBBBBBBBBBBBBBBBBB", "000000000000001", now-20, now-500, nil))
	l, err := b.List(ctx, nil)
	if err != nil || len(l.Locks) != 2 || l.More || !l.Now.Equal(time.UnixMilli(now)) {
		t.Fatalf("List: got %+v, %v", l, err)
	}
	if got := l.Locks[0]; got.KeyHash != HashKey("b") || got.LockIDHash != HashKey(goodID) || got.Key != "" || got.LockID != "" ||
		got.Fence != "000000000000002" || !got.ExpiresAt.Equal(time.UnixMilli(now+5000)) || !got.AcquiredAt.Equal(time.UnixMilli(now-10)) {
		t.Errorf("first lock: sanitized fields only without Raw; got %+v", got)
	}
	if l.Locks[0].Identity != "host-b:7" || l.Locks[1].Identity != "" {
		t.Errorf("identities: %q, %q", l.Locks[0].Identity, l.Locks[1].Identity)
	}
	// Live is the liveness rule at the list's server time: expired 500 ms
	// ago is still live (tolerance 1 s).
	if !l.Live(l.Locks[1]) {
		t.Error("a lock expired 500 ms ago is live within the tolerance")
	}
	if l.Live(LockInfo{ExpiresAt: time.UnixMilli(now - rules.ToleranceMs)}) {
		t.Error("a lock expired exactly one tolerance ago is not live")
	}

	// Raw, expired rows, limit 1: one more row than the limit sets More.
	mock.ExpectQuery(`FROM "syncguard_locks" AS l`).WithArgs(true, int64(2)).WillReturnRows(
		sqlmock.NewRows(listCols).
			AddRow(now, "b", goodID, "000000000000002", now-10, now+5000, nil).
			AddRow(now, "a", "BBBBBBBBBBBBBBBBBBBBBB", "000000000000001", now-20, now-5000, nil))
	l, err = b.List(ctx, &ListOptions{Limit: 1, Expired: true, Raw: true})
	if err != nil || len(l.Locks) != 1 || !l.More || l.Locks[0].Key != "b" || l.Locks[0].LockID != goodID {
		t.Fatalf("List(Limit 1, Raw): got %+v, %v", l, err)
	}

	// No limit: NULL. An empty table answers one row of NULLs with now_ms.
	mock.ExpectQuery(`FROM "syncguard_locks" AS l`).WithArgs(false, nil).WillReturnRows(
		sqlmock.NewRows(listCols).AddRow(now, nil, nil, nil, nil, nil, nil))
	l, err = b.List(ctx, &ListOptions{Limit: -1})
	if err != nil || len(l.Locks) != 0 || l.Locks == nil || l.More || !l.Now.Equal(time.UnixMilli(now)) {
		t.Fatalf("List of an empty table: got %+v, %v", l, err)
	}

	// A failed read is a classified *Error.
	mock.ExpectQuery(`FROM "syncguard_locks" AS l`).WillReturnError(&pgErr{code: "42P01"})
	_, err = b.List(ctx, nil)
	wantCode(t, err, ErrInternal)
	if err := mock.ExpectationsWereMet(); err != nil {
		t.Fatal(err)
	}
}

func TestLastFence(t *testing.T) {
	b, mock := newMock(t, nil)
	ctx := context.Background()
	k, _ := rules.DeriveKey("job")
	mock.ExpectQuery(`"syncguard_fence_counters" AS c`).WithArgs(k.Fence).WillReturnRows(
		sqlmock.NewRows([]string{"now_ms", "fence"}).AddRow(int64(5000), int64(42)))
	f, now, err := b.LastFence(ctx, "job")
	if err != nil || f != "000000000000042" || !now.Equal(time.UnixMilli(5000)) {
		t.Fatalf("LastFence: %q %v %v", f, now, err)
	}
	mock.ExpectQuery(`"syncguard_fence_counters" AS c`).WillReturnRows(
		sqlmock.NewRows([]string{"now_ms", "fence"}).AddRow(int64(5000), nil))
	if f, now, err := b.LastFence(ctx, "job"); err != nil || f != "" || !now.Equal(time.UnixMilli(5000)) {
		t.Fatalf("LastFence of a key never acquired: %q %v %v", f, now, err)
	}
	// Bad keys fail before I/O; a cancelled context too.
	_, _, err = b.LastFence(ctx, "")
	wantCode(t, err, ErrInvalidArgument)
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, _, err = b.LastFence(cctx, "job")
	if e := (*Error)(nil); !errors.As(err, &e) || e.Code != ErrAborted || e.Key != "job" {
		t.Fatalf("cancelled: %v", err)
	}
	if err := mock.ExpectationsWereMet(); err != nil {
		t.Fatal(err)
	}
}
