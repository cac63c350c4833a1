package syncguard

import (
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/DATA-DOG/go-sqlmock"

	"github.com/syncguard/syncguard-go/internal/rules"
)

func TestNewRejectsBadConfig(t *testing.T) {
	db, _, _ := sqlmock.New()
	defer db.Close()
	bad := []Config{
		{TableName: "locks; DROP TABLE x"},
		{TableName: `a"b`},
		{TableName: "1abc"},
		{FenceTableName: "fence-table"},
		{TableName: "same", FenceTableName: "same"},
		{TableName: "Same", FenceTableName: "same"},
		{TableName: strings.Repeat("a", 52)},
		{FenceTableName: strings.Repeat("b", 64)},
	}
	for _, c := range bad {
		c.Dialect = fakeDialect{}
		_, err := New(db, &c)
		wantCode(t, err, ErrInvalidArgument)
	}
	ok := Config{TableName: strings.Repeat("a", 51), FenceTableName: "MixedCase_Fences", Dialect: fakeDialect{}}
	if _, err := New(db, &ok); err != nil {
		t.Fatalf("valid config rejected: %v", err)
	}
	_, err := New(nil, nil)
	wantCode(t, err, ErrInvalidArgument)
}

func TestNewUnregisteredDriverNamesAdapters(t *testing.T) {
	db, _, _ := sqlmock.New()
	defer db.Close()
	_, err := New(db, nil)
	wantCode(t, err, ErrInvalidArgument)
	for _, want := range []string{"github.com/syncguard/syncguard-go/pq", "github.com/syncguard/syncguard-go/pgxstd", "Config.Dialect"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %s", err, want)
		}
	}
}

// Every invalid input fails with InvalidArgument before any I/O: the mock
// has no expectations, so any statement would fail the test with a
// different error.
func TestValidationBeforeIO(t *testing.T) {
	b, mock := newMock(t, nil)
	ctx := context.Background()
	badKeys := []string{"", strings.Repeat("a", 511) + "é", "a\x00b", "\xff\xfe"}
	for _, k := range badKeys {
		_, err := b.Acquire(ctx, k, time.Second)
		wantCode(t, err, ErrInvalidArgument)
		_, err = b.IsLocked(ctx, k)
		wantCode(t, err, ErrInvalidArgument)
		_, err = b.LookupKey(ctx, k)
		wantCode(t, err, ErrInvalidArgument)
	}
	for _, ttl := range []time.Duration{0, -time.Second, 999 * time.Microsecond} {
		_, err := b.Acquire(ctx, "k", ttl)
		wantCode(t, err, ErrInvalidArgument)
		_, err = b.Extend(ctx, goodID, ttl)
		wantCode(t, err, ErrInvalidArgument)
	}
	for _, id := range []string{"", "short", goodID + "A", "AAAAAAAAAAAAAAAAAAAAA/", "AAAAAAAAAAAAAAAAAAAAA\x00"} {
		_, err := b.Release(ctx, id)
		wantCode(t, err, ErrInvalidArgument)
		_, err = b.Extend(ctx, id, time.Second)
		wantCode(t, err, ErrInvalidArgument)
		_, err = b.LookupID(ctx, id)
		wantCode(t, err, ErrInvalidArgument)
	}
	if err := mock.ExpectationsWereMet(); err != nil {
		t.Fatal(err)
	}
}

func TestCancelledContextBeforeIO(t *testing.T) {
	b, mock := newMock(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := b.Acquire(ctx, "k", time.Second)
	wantCode(t, err, ErrAborted)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Aborted error should wrap context.Canceled: %v", err)
	}
	_, err = b.Release(ctx, goodID)
	wantCode(t, err, ErrAborted)
	_, err = b.Extend(ctx, goodID, time.Second)
	wantCode(t, err, ErrAborted)
	_, err = b.IsLocked(ctx, "k")
	wantCode(t, err, ErrAborted)
	_, err = b.LookupKey(ctx, "k")
	wantCode(t, err, ErrAborted)
	_, err = b.LookupID(ctx, goodID)
	wantCode(t, err, ErrAborted)

	dctx, dcancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer dcancel()
	_, err = b.Acquire(dctx, "k", time.Second)
	wantCode(t, err, ErrNetworkTimeout)
	if err := mock.ExpectationsWereMet(); err != nil {
		t.Fatal(err)
	}
}

// lib/pq reports our own cancellation as SQLSTATE 57014. The context must be
// checked first, so it reads as Aborted, not as a server statement timeout.
func TestOwnCancellationBeats57014(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var err error = classifier{dialect: fakeDialect{}}.wrap(ctx, "extend", &pgErr{code: "57014"})
	wantCode(t, err, ErrAborted)
	var pe *pgErr
	if !errors.As(err, &pe) || !errors.Is(err, context.Canceled) {
		t.Errorf("Aborted must wrap both the context error and the driver error: %v", err)
	}

	b, mock := newMock(t, nil)
	mock.ExpectQuery(`UPDATE "syncguard_locks"`).WillReturnError(&pgErr{code: "57014"})
	_, err = b.Extend(context.Background(), goodID, time.Second)
	wantCode(t, err, ErrNetworkTimeout)
	if !errors.As(err, &pe) {
		t.Errorf("errors.As must reach the driver error: %v", err)
	}
}

// Cancelling while a statement is in flight ends the call with Aborted.
func TestCancelInFlight(t *testing.T) {
	b, mock := newMock(t, &Config{ReleaseTimeout: 50 * time.Millisecond})
	mock.ExpectQuery("INSERT INTO").WillDelayFor(time.Minute).
		WillReturnRows(sqlmock.NewRows([]string{"a", "b", "c", "d", "e", "f", "g", "o", "h"}).AddRow(nil, nil, nil, nil, false, int64(1000), false, false, int64(0)))
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(20*time.Millisecond, cancel)
	start := time.Now()
	_, err := b.Acquire(ctx, "k", time.Second)
	wantCode(t, err, ErrAborted)
	// Only a call that ignored the cancel waits for the minute-long
	// statement: 30 s holds on any machine.
	if d := time.Since(start); d > 30*time.Second {
		t.Fatalf("cancellation took %v", d)
	}
}

func TestErrorClassification(t *testing.T) {
	cases := []struct {
		err  error
		want Code
	}{
		{&pgErr{code: "28P01", severity: "FATAL"}, ErrAuthFailed},
		{&pgErr{code: "28000"}, ErrAuthFailed},
		{&pgErr{code: "42501"}, ErrAuthFailed},
		{&pgErr{code: "53300", severity: "FATAL"}, ErrRateLimited},
		{&pgErr{code: "53200"}, ErrServiceUnavailable},
		{&pgErr{code: "57014"}, ErrNetworkTimeout},
		{&pgErr{code: "55P03"}, ErrNetworkTimeout},
		{&pgErr{code: "57P01", severity: "FATAL"}, ErrServiceUnavailable},
		{&pgErr{code: "08006"}, ErrServiceUnavailable},
		{&pgErr{code: "40P01"}, ErrServiceUnavailable},
		{&pgErr{code: "40001"}, ErrServiceUnavailable},
		{&pgErr{code: "25006"}, ErrServiceUnavailable},
		{&pgErr{code: "22021"}, ErrInvalidArgument},
		{&pgErr{code: "23505"}, ErrInvalidArgument},
		{&pgErr{code: "42P01"}, ErrInternal},
		{&pgErr{code: "XX000"}, ErrInternal},
		{&pgBouncerErr{pgErr{code: "08P01"}}, ErrAuthFailed},
		{&pgErr{code: "08P01"}, ErrServiceUnavailable},
		{&pgErr{code: "XX000", severity: "FATAL"}, ErrServiceUnavailable},
		{sqldriver.ErrBadConn, ErrServiceUnavailable},
		{sql.ErrConnDone, ErrServiceUnavailable},
		{io.ErrUnexpectedEOF, ErrServiceUnavailable},
		{&net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}, ErrServiceUnavailable},
		{&net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}, ErrNetworkTimeout},
		{context.DeadlineExceeded, ErrNetworkTimeout},
		{errors.New("something odd"), ErrInternal},
	}
	cl := classifier{dialect: fakeDialect{}}
	for _, c := range cases {
		got := cl.wrap(context.Background(), "op", c.err)
		if got.Code != c.want {
			t.Errorf("%v: got %s, want %s", c.err, got.Code, c.want)
		}
		if !errors.Is(got, c.err) && !errors.Is(got, c.want) {
			t.Errorf("%v: cause not reachable", c.err)
		}
	}
	readOnly := cl.wrap(context.Background(), "acquire", &pgErr{code: "25006"})
	if !readOnly.Retryable() || !strings.Contains(readOnly.Error(), "standby") || !strings.Contains(readOnly.Error(), "retryable") {
		t.Errorf("25006 must be retryable with a message that says the server is a standby and that it is retryable: %v", readOnly)
	}
	missing := cl.wrap(context.Background(), "acquire", &pgErr{code: "42P01"})
	if !strings.Contains(missing.Error(), "SetupSchema") {
		t.Errorf("missing table error must name SetupSchema: %v", missing)
	}
}

func TestAcquireOutcomesFromRow(t *testing.T) {
	cols := []string{"lock_id", "expires_at_ms", "acquired_at_ms", "fence", "fence_exhausted", "now_ms", "absent", "opened", "ahead_n"}
	// Another holder's row: contention, not an error, and nothing of the
	// other holder leaks into the result. The holder's expiry (server
	// time) tells the lock helper when to try again: when the lock is no
	// longer live, expires + tolerance, 1 ms after.
	b, mock := newMock(t, nil)
	mock.ExpectQuery("INSERT INTO").WillReturnRows(sqlmock.NewRows(cols).AddRow("BBBBBBBBBBBBBBBBBBBBBB", int64(2000), int64(1000), "000000000000007", false, int64(1500), false, false, int64(0)))
	r, err := b.Acquire(context.Background(), "k", time.Second)
	if err != nil || r.OK || r.Reason != ReasonLocked || r.Fence != "" || r.LockID != "" {
		t.Fatalf("contention: got %+v, %v", r, err)
	}
	if r.RetryIn != (2000+rules.ToleranceMs+1-1500)*time.Millisecond {
		t.Errorf("contention: retry in %v, want %v (holder expires 2000, server now 1500)", r.RetryIn, (2000+rules.ToleranceMs+1-1500)*time.Millisecond)
	}
	// Nobody and no fence: contention (a lost race), expiry unknown.
	mock.ExpectQuery("INSERT INTO").WillReturnRows(sqlmock.NewRows(cols).AddRow(nil, nil, nil, nil, false, int64(1500), false, false, int64(0)))
	r, err = b.Acquire(context.Background(), "k", time.Second)
	if err != nil || r.OK || r.Reason != ReasonLocked || r.RetryIn != 0 {
		t.Fatalf("lost race: got %+v, %v", r, err)
	}
	// Fence counter at its maximum: Internal, and the statement committed nothing.
	mock.ExpectQuery("INSERT INTO").WillReturnRows(sqlmock.NewRows(cols).AddRow(nil, nil, nil, nil, true, int64(1500), false, false, int64(0)))
	_, err = b.Acquire(context.Background(), "k", time.Second)
	wantCode(t, err, ErrInternal)
	if err := mock.ExpectationsWereMet(); err != nil {
		t.Fatal(err)
	}
}

func TestAcquireArgumentsAndTTLRounding(t *testing.T) {
	b, mock := newMock(t, nil)
	k, _ := rules.DeriveKey("café")
	mock.ExpectQuery("INSERT INTO").
		WithArgs(k.Storage, sqlmock.AnyArg(), k.Fence, "café", int64(1)).
		WillReturnRows(sqlmock.NewRows([]string{"a", "b", "c", "d", "e", "f", "g", "o", "h"}).AddRow(nil, nil, nil, nil, false, int64(1000), false, false, int64(0)))
	// Decomposed input is normalized; 1.9 ms counts as 1 ms.
	if _, err := b.Acquire(context.Background(), "cafe\u0301", 1900*time.Microsecond); err != nil {
		t.Fatal(err)
	}
	if err := mock.ExpectationsWereMet(); err != nil {
		t.Fatal(err)
	}
}

func TestReleaseAndExtendReasons(t *testing.T) {
	b, mock := newMock(t, nil)
	rc := []string{"lock_id", "seen", "now", "woke", "woke_channel", "left_queue"}
	mock.ExpectQuery("DELETE FROM").WillReturnRows(sqlmock.NewRows(rc).AddRow(goodID, int64(5000), int64(1000), "0123456789abcdef", "ch", false))
	mock.ExpectQuery("DELETE FROM").WillReturnRows(sqlmock.NewRows(rc).AddRow(nil, int64(500), int64(2000), nil, nil, false))
	mock.ExpectQuery("DELETE FROM").WillReturnRows(sqlmock.NewRows(rc).AddRow(nil, nil, int64(2000), nil, nil, false))
	want := []ReleaseResult{{OK: true}, {Reason: ReasonExpired}, {Reason: ReasonNotFound}}
	for i, w := range want {
		got, err := b.Release(context.Background(), goodID)
		if err != nil || got != w {
			t.Errorf("release %d: got %+v, %v; want %+v", i, got, err, w)
		}
	}
	ec := []string{"lock_id", "new", "seen", "now"}
	mock.ExpectQuery("UPDATE").WillReturnRows(sqlmock.NewRows(ec).AddRow(goodID, int64(9000), int64(5000), int64(1000)))
	mock.ExpectQuery("UPDATE").WillReturnRows(sqlmock.NewRows(ec).AddRow(nil, nil, int64(500), int64(2000)))
	mock.ExpectQuery("UPDATE").WillReturnRows(sqlmock.NewRows(ec).AddRow(nil, nil, nil, int64(2000)))
	got, err := b.Extend(context.Background(), goodID, time.Second)
	if err != nil || !got.OK || !got.ExpiresAt.Equal(time.UnixMilli(9000)) {
		t.Errorf("extend ok: %+v, %v", got, err)
	}
	got, _ = b.Extend(context.Background(), goodID, time.Second)
	if got.OK || got.Reason != ReasonExpired {
		t.Errorf("extend expired: %+v", got)
	}
	got, _ = b.Extend(context.Background(), goodID, time.Second)
	if got.OK || got.Reason != ReasonNotFound {
		t.Errorf("extend not found: %+v", got)
	}
	if err := mock.ExpectationsWereMet(); err != nil {
		t.Fatal(err)
	}
}

func TestLookupSanitizesAndChecksLiveness(t *testing.T) {
	b, mock := newMock(t, nil)
	cols := []string{"lock_id", "expires_at_ms", "acquired_at_ms", "fence", "user_key", "now", "identity"}
	mock.ExpectQuery("LEFT JOIN").WillReturnRows(sqlmock.NewRows(cols).AddRow(goodID, int64(10_000), int64(1_000), "000000000000003", "k", int64(5_000), "host:1"))
	mock.ExpectQuery("LEFT JOIN").WillReturnRows(sqlmock.NewRows(cols).AddRow(goodID, int64(10_000), int64(1_000), "000000000000003", "k", int64(11_000), nil))
	mock.ExpectQuery("LEFT JOIN").WillReturnRows(sqlmock.NewRows(cols).AddRow("BBBBBBBBBBBBBBBBBBBBBB", int64(10_000), int64(1_000), "000000000000003", "k", int64(5_000), nil))
	info, err := b.LookupKey(context.Background(), "k")
	if err != nil || info == nil || info.KeyHash != HashKey("k") || info.LockIDHash != HashKey(goodID) || info.Fence != "000000000000003" || info.Identity != "host:1" {
		t.Fatalf("live lookup: %+v, %v", info, err)
	}
	// Expired by exactly the tolerance: absent.
	if info, err := b.LookupKey(context.Background(), "k"); err != nil || info != nil {
		t.Fatalf("expired lookup: %+v, %v", info, err)
	}
	// A row whose lock_id differs from the one asked for is never returned.
	if info, err := b.LookupID(context.Background(), goodID); err != nil || info != nil {
		t.Fatalf("ownership check: %+v, %v", info, err)
	}
	if err := mock.ExpectationsWereMet(); err != nil {
		t.Fatal(err)
	}
}

func TestErrorStringHidesRawValues(t *testing.T) {
	e := &Error{Op: "release", Code: ErrServiceUnavailable, Key: "user@example.com", LockID: goodID, Err: io.EOF}
	s := e.Error()
	if strings.Contains(s, "user@example.com") || strings.Contains(s, goodID) {
		t.Fatalf("raw key or lockId in %q", s)
	}
	if !strings.Contains(s, HashKey("user@example.com")) || !e.Retryable() || CodeOf(e) != ErrServiceUnavailable {
		t.Fatalf("unexpected %q", s)
	}
}

// Under a REPEATABLE READ or SERIALIZABLE default isolation a statement
// can be aborted with a serialization failure where READ COMMITTED would
// re-check the latest row: on the pool path it runs once more in a READ
// COMMITTED transaction, whose answer the caller gets.
func TestPoolSerializationFailureRerunsInReadCommitted(t *testing.T) {
	for _, st := range []string{"40001", "40P01"} {
		b, mock := newMock(t, &Config{DisablePrepare: true})
		mock.ExpectQuery("INSERT INTO").WillReturnError(&pgErr{code: st})
		mock.ExpectBegin()
		mock.ExpectQuery("INSERT INTO").WillReturnRows(sqlmock.NewRows([]string{"lock_id", "e", "a", "f", "x", "now", "absent", "opened", "ahead_n"}).
			AddRow(nil, nil, nil, nil, false, int64(1000), false, false, int64(0)))
		mock.ExpectCommit()
		r, err := b.Acquire(context.Background(), "k", time.Second)
		if err != nil || r.OK || r.Reason != ReasonLocked {
			t.Fatalf("%s on acquire: got %+v, %v; want the re-run's answer (locked)", st, r, err)
		}
		if err := mock.ExpectationsWereMet(); err != nil {
			t.Fatal(err)
		}
	}
	// A second failure (not possible in READ COMMITTED for these
	// statements, but a driver could report one) is an error, not a loop.
	b, mock := newMock(t, &Config{DisablePrepare: true})
	mock.ExpectQuery("DELETE FROM").WillReturnError(&pgErr{code: "40001"})
	mock.ExpectBegin()
	mock.ExpectQuery("DELETE FROM").WillReturnError(&pgErr{code: "40001"})
	mock.ExpectRollback()
	_, err := b.Release(context.Background(), rules.GenerateLockID())
	wantCode(t, err, ErrServiceUnavailable)
	if err := mock.ExpectationsWereMet(); err != nil {
		t.Fatal(err)
	}
}

func TestOutcomeUnknown(t *testing.T) {
	bg := context.Background()
	cancelled, cancel := context.WithCancel(bg)
	cancel()
	cases := []struct {
		ctx  context.Context
		e    *Error
		want bool
	}{
		{cancelled, &Error{Code: ErrAborted}, true},
		{bg, &Error{Code: ErrServiceUnavailable}, true},                    // EOF, reset: no answer
		{bg, &Error{Code: ErrServiceUnavailable, SQLState: "57P01"}, true}, // terminated mid-statement
		{bg, &Error{Code: ErrServiceUnavailable, SQLState: "08006"}, true},
		{bg, &Error{Code: ErrNetworkTimeout, SQLState: "57014"}, false}, // statement_timeout: rolled back
		{bg, &Error{Code: ErrServiceUnavailable, SQLState: "53200"}, false},
		{bg, &Error{Code: ErrInternal, SQLState: "42P01"}, false},
		{bg, &Error{Code: ErrAuthFailed}, false},
	}
	for _, c := range cases {
		if got := outcomeUnknown(c.ctx, c.e); got != c.want {
			t.Errorf("outcomeUnknown(%+v) = %v, want %v", c.e, got, c.want)
		}
	}
}

// msgErr is a server error with PostgreSQL's message text.
type msgErr struct {
	pgErr
	msg string
}

func (e *msgErr) Error() string { return e.msg }
func (e *msgErr) Unwrap() error { return &e.pgErr }

// A privilege error (42501) says which object the role lacks a privilege
// on, as the server named it, and which privileges the operation needs on
// which tables: the schema, not the tables, is often what is missing.
func TestPrivilegeErrorSaysWhatLacksWhich(t *testing.T) {
	for _, c := range []struct {
		server string
		op     func(b *Backend) error
		want   []string
	}{
		{`pq: permission denied for schema app`, func(b *Backend) error {
			_, err := b.Acquire(context.Background(), "k", time.Second)
			return err
		}, []string{"lacks a privilege on schema app", `acquire needs USAGE on the schema of "L" and "F" and SELECT, INSERT, UPDATE on both`}},
		{`ERROR: permission denied for table "L" (SQLSTATE 42501)`, func(b *Backend) error {
			_, err := b.Release(context.Background(), rules.GenerateLockID())
			return err
		}, []string{`lacks a privilege on table "L"`, `release needs USAGE on the schema of "L" and SELECT, DELETE on it`}},
		{`ERROR: permission denied for table L (SQLSTATE 42501)`, func(b *Backend) error {
			_, err := b.IsLocked(context.Background(), "k")
			return err
		}, []string{`lacks a privilege on table L`, `isLocked needs USAGE on the schema of "L" and SELECT on it`}},
		{`ERROR: permission denied for table L (SQLSTATE 42501)`, func(b *Backend) error {
			_, err := b.List(context.Background(), nil)
			return err
		}, []string{`lacks a privilege on table L`, `list needs USAGE on the schema of "L" and SELECT on it`}},
		{`ERROR: permission denied for table F (SQLSTATE 42501)`, func(b *Backend) error {
			_, _, err := b.LastFence(context.Background(), "k")
			return err
		}, []string{`lacks a privilege on table F`, `lastFence needs USAGE on the schema of "F" and SELECT on it`}},
	} {
		b, mock := newMock(t, &Config{TableName: "L", FenceTableName: "F"})
		mock.ExpectQuery("").WillReturnError(&msgErr{pgErr{code: "42501"}, c.server})
		err := c.op(b)
		wantCode(t, err, ErrAuthFailed)
		for _, w := range c.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("server said %q: the error must say %q; got %v", c.server, w, err)
			}
		}
		if err != nil && strings.Contains(err.Error(), "on the lock tables") {
			t.Errorf("no blanket 'on the lock tables': %v", err)
		}
	}
}

// A Backend that cannot LISTEN says why, and how to get prompt hand-offs.
func TestNoListenerNamesTheWay(t *testing.T) {
	db, _, _ := sqlmock.New()
	defer db.Close()
	b, err := New(db, &Config{Dialect: fakeDialect{}, Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	st := b.NotificationStatus(context.Background())
	if st.Active || !strings.Contains(st.Reason, "driver.Listener") || !strings.Contains(st.Reason, "pq.ListenDialect(dsn)") {
		t.Errorf("status %+v; want inactive, the reason naming driver.Listener and the lib/pq ways", st)
	}
}

// A waiter's attempts carry its own lockId and the queue window, and the
// first one registers its wake-up; a plain Acquire (or a single attempt
// of Lock) does neither.
func TestWaiterAttemptQueues(t *testing.T) {
	b, mock := newMock(t, &Config{})
	for _, once := range []bool{false, true} {
		w := b.Queue("k", "", once).(*queueWaiter)
		args := []sqldriver.Value{sqlmock.AnyArg(), sqlmock.AnyArg(), sqlmock.AnyArg(), sqlmock.AnyArg(), sqlmock.AnyArg()}
		if !once {
			args = []sqldriver.Value{sqlmock.AnyArg(), w.q.LockID, sqlmock.AnyArg(), sqlmock.AnyArg(), sqlmock.AnyArg(), defaultWaitWindow.Milliseconds(), false}
		}
		mock.ExpectQuery("INSERT INTO").WithArgs(args...).
			WillReturnRows(sqlmock.NewRows([]string{"a", "b", "c", "d", "e", "f", "g", "o", "h"}).AddRow(nil, int64(5000), nil, nil, false, int64(1000), false, false, int64(0)))
		if _, err := w.Attempt(context.Background(), time.Second); err != nil {
			t.Fatalf("once %v: %v", once, err)
		}
		if h := w.hint(); (h.Wake != nil) != !once || (h.Renew == defaultWaitWindow*2/3) != !once {
			t.Errorf("once %v: hint %+v: the waiter joined the queue: %v, want %v", once, h, h.Wake != nil, !once)
		}
		if w.q != nil {
			w.q.Close() // no withdrawal statement expected
		}
	}
	if err := mock.ExpectationsWereMet(); err != nil {
		t.Fatal(err)
	}
}

// A waiter giving up withdraws with a release of its lockId. When that
// statement finds neither a lock nor its queue row, a hand-off to it may
// have been committing (its snapshot missed the new lock row): it releases
// once more, with a new snapshot, so the key is passed on, not left held.
func TestWithdrawReleasesAgainWhenAHandOffRaced(t *testing.T) {
	b, mock := newMock(t, &Config{})
	w := b.Queue("k", "", false)
	lockID := w.(*queueWaiter).q.LockID
	mock.ExpectQuery("INSERT INTO").
		WillReturnRows(sqlmock.NewRows([]string{"a", "b", "c", "d", "e", "f", "g", "o", "h"}).AddRow(nil, int64(5000), nil, nil, false, int64(1000), false, false, int64(0)))
	if _, err := w.Attempt(context.Background(), time.Second); err != nil {
		t.Fatal(err)
	}
	rc := []string{"lock_id", "seen", "now", "woke", "woke_channel", "left_queue"}
	// Neither the lock nor the queue row: released again.
	mock.ExpectQuery("DELETE FROM").WithArgs(lockID, true, true, sqlmock.AnyArg()).WillReturnRows(sqlmock.NewRows(rc).AddRow(nil, nil, int64(2000), nil, nil, false))
	mock.ExpectQuery("DELETE FROM").WithArgs(lockID, true, true, sqlmock.AnyArg()).WillReturnRows(sqlmock.NewRows(rc).AddRow(lockID, nil, int64(2000), nil, nil, false))
	if err := w.Leave(context.Background()); err != nil {
		t.Fatal(err)
	}
	// It left the queue: once is enough.
	w = b.Queue("k", "", false)
	lockID = w.(*queueWaiter).q.LockID
	mock.ExpectQuery("INSERT INTO").
		WillReturnRows(sqlmock.NewRows([]string{"a", "b", "c", "d", "e", "f", "g", "o", "h"}).AddRow(nil, int64(5000), nil, nil, false, int64(1000), false, false, int64(0)))
	if _, err := w.Attempt(context.Background(), time.Second); err != nil {
		t.Fatal(err)
	}
	mock.ExpectQuery("DELETE FROM").WithArgs(lockID, true, true, sqlmock.AnyArg()).WillReturnRows(sqlmock.NewRows(rc).AddRow(nil, nil, int64(2000), nil, nil, true))
	if err := w.Leave(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := mock.ExpectationsWereMet(); err != nil {
		t.Errorf("rule: a withdrawal that found neither its lock nor its queue row releases once more, and only then: %v", err)
	}
}
