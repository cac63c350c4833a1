package syncguard

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/DATA-DOG/go-sqlmock"

	"github.com/syncguard/syncguard-go/internal/rules"
)

func TestDefaultIdentityIsHostAndPid(t *testing.T) {
	host, _ := os.Hostname()
	if got, want := DefaultIdentity(), host+":"+strconv.Itoa(os.Getpid()); host != "" && got != want {
		t.Errorf("DefaultIdentity() = %q, want %q", got, want)
	}
}

func TestIdentityTooLongIsRejectedBeforeIO(t *testing.T) {
	long := strings.Repeat("x", maxIdentity+1)
	if _, err := (&Config{Identity: long}).resolve(); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("Config.Identity of %d bytes: %v", len(long), err)
	}
	if _, err := (&LockOptions{Identity: long}).resolve(); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("LockOptions.Identity of %d bytes: %v", len(long), err)
	}
	if _, err := (&LockOptions{Identity: long[:maxIdentity]}).resolve(); err != nil {
		t.Errorf("LockOptions.Identity of %d bytes: %v", maxIdentity, err)
	}
}

// Lock's identity goes to the Backend as the waiter's argument; "" means
// the Backend's Config.Identity.
func TestQueueIdentity(t *testing.T) {
	b, _ := newMock(t, &Config{Identity: "host:1"})
	if got := b.Queue("k", "job-1", true).(*queueWaiter).identity; got != "job-1" {
		t.Errorf("Lock's identity: %q", got)
	}
	if got := b.Queue("k", "", false).(*queueWaiter).identity; got != "host:1" {
		t.Errorf("no identity: %q, want the Backend's", got)
	}
}

// Without an identity an acquire sends the statement it sent before the
// holders table existed; with one, the holders variant with the identity
// as its last argument.
func TestAcquireStatementByIdentity(t *testing.T) {
	s := renderStatements("syncguard_locks", "syncguard_fence_counters")
	for _, i := range []int{stmtAcquire, stmtAcquireWait, stmtReleaseQueue, stmtReleasePlain, stmtLookupKeyPlain, stmtLookupIDPlain} {
		if strings.Contains(s.ops[i], "_holders") {
			t.Errorf("statement %d uses the holders table:\n%s", i, s.ops[i])
		}
	}
	for _, i := range []int{stmtAcquireHolders, stmtAcquireWaitHolders, stmtRelease, stmtLookupKey, stmtLookupID} {
		if !strings.Contains(s.ops[i], `"syncguard_locks_holders"`) {
			t.Errorf("statement %d does not use the holders table", i)
		}
	}
	if !strings.Contains(s.ops[stmtAcquireHolders], "$6::text") || !strings.Contains(s.ops[stmtAcquireWaitHolders], "$8::text") {
		t.Error("the identity is the argument after the acquire's others")
	}

	b, mock := newMock(t, &Config{Identity: "host-a:1"})
	k, _ := rules.DeriveKey("k")
	mock.ExpectQuery(`INSERT INTO "syncguard_locks_holders"`).
		WithArgs(k.Storage, sqlmock.AnyArg(), k.Fence, "k", int64(1000), "host-a:1").
		WillReturnRows(sqlmock.NewRows([]string{"a", "b", "c", "d", "e", "f", "g", "o", "h"}).AddRow(nil, nil, nil, nil, false, int64(1000), false, false, int64(0)))
	if _, err := b.Acquire(context.Background(), "k", time.Second); err != nil {
		t.Fatal(err)
	}
	if err := mock.ExpectationsWereMet(); err != nil {
		t.Fatal(err)
	}
}
