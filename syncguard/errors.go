package syncguard

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/syncguard/syncguard-go/internal/rules"
)

// Code classifies every error this package returns: each code is an error
// value of its own, the sentinel that errors.Is matches. The names are the
// spec's LockError codes, so Go and Node services log the same words.
type Code string

// The codes. Each is also the sentinel for errors.Is, in the manner of
// io/fs.ErrNotExist:
//
//	if errors.Is(err, syncguard.ErrInvalidArgument) { ... }
//	switch syncguard.CodeOf(err) { case syncguard.ErrAborted: ... }
const (
	// ErrServiceUnavailable: PostgreSQL could not be reached, the
	// connection broke, or the server is out of resources. Retryable.
	ErrServiceUnavailable Code = "ServiceUnavailable"
	// ErrAuthFailed: the server rejected the credentials or a privilege is
	// missing.
	ErrAuthFailed Code = "AuthFailed"
	// ErrInvalidArgument: bad input (key, lockId, ttl, configuration),
	// reported before any I/O.
	ErrInvalidArgument Code = "InvalidArgument"
	// ErrRateLimited: a pool or server connection limit was hit. Retryable.
	ErrRateLimited Code = "RateLimited"
	// ErrNetworkTimeout: a deadline passed (the context's, or a server-side
	// statement or lock timeout). Retryable.
	ErrNetworkTimeout Code = "NetworkTimeout"
	// ErrAcquisitionTimeout: the lock helper ran out of time or retries
	// while the lock stayed contended.
	ErrAcquisitionTimeout Code = "AcquisitionTimeout"
	// ErrAborted: the caller's context was cancelled.
	ErrAborted Code = "Aborted"
	// ErrInternal: anything else, including a missing schema and fence
	// overflow.
	ErrInternal Code = "Internal"
)

// Error returns the code's name, as the spec spells it ("Aborted").
func (c Code) Error() string { return string(c) }

// Retryable reports whether an operation that failed with this code may
// succeed if tried again unchanged: ServiceUnavailable, RateLimited and
// NetworkTimeout.
func (c Code) Retryable() bool {
	return c == ErrServiceUnavailable || c == ErrRateLimited || c == ErrNetworkTimeout
}

// Error is the one error type of this package, in the manner of
// io/fs.PathError: every error returned by syncguard is a *Error. Key and
// LockID hold the raw values where known; Error() prints only their
// HashKey forms, so a logged error never leaks a key or a lockId.
type Error struct {
	Op       string // operation: "acquire", "release", "extend", "isLocked", "lookup", "new", "setupSchema", ...
	Code     Code
	Key      string // raw key, when the operation had one
	LockID   string // raw lockId, when the operation had one
	SQLState string // SQLSTATE reported by PostgreSQL, if any
	Msg      string // what went wrong, in words
	Err      error  // underlying cause (driver error, context error), may be nil
}

// Error prints the operation, the hashed key and lockId, the code, the
// SQLSTATE, the message and the cause; never a raw key or lockId.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("syncguard: ")
	if e.Op != "" {
		b.WriteString(e.Op + " ")
	}
	if e.Key != "" {
		b.WriteString("key#" + rules.HashKey(e.Key) + " ")
	}
	if e.LockID != "" && rules.ValidateLockID(e.LockID) == nil {
		b.WriteString("lock#" + rules.HashKey(e.LockID) + " ")
	}
	b.WriteString(string(e.Code))
	if e.SQLState != "" {
		b.WriteString(" (SQLSTATE " + e.SQLState + ")")
	}
	if e.Msg != "" {
		b.WriteString(": " + e.Msg)
	}
	if e.Err != nil {
		b.WriteString(": " + e.Err.Error())
	}
	return b.String()
}

// Unwrap returns the cause, so errors.As reaches the driver's error and
// errors.Is reaches context.Canceled or context.DeadlineExceeded.
func (e *Error) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrXxx) true for e's Code.
func (e *Error) Is(target error) bool { c, ok := target.(Code); return ok && c == e.Code }

// Retryable reports whether e.Code is transient (see Code.Retryable).
func (e *Error) Retryable() bool { return e.Code.Retryable() }

// CodeOf returns the Code of the first *Error in err's chain, or "" when
// there is none (err is nil or did not come from this package).
func CodeOf(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// sqlState is the SQLSTATE of the first *Error in err's chain that has
// one: the server answered with that error.
func sqlState(err error) string {
	for err != nil {
		var e *Error
		if !errors.As(err, &e) {
			return ""
		}
		if e.SQLState != "" {
			return e.SQLState
		}
		err = e.Err
	}
	return ""
}

func invalidArg(op, msg string) *Error {
	return &Error{Op: op, Code: ErrInvalidArgument, Msg: msg}
}

// plural is "1 attempt", "2 attempts": n and noun, plural unless n is 1.
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}

// waitError is how a wait for key ends without the lock (cause: ctx's,
// if done): busy once any attempt got an answer, else the outage, with
// its last real cause; the only attempt's error when the wait's end cut it.
// refused attempts got an error back from the server (a SQLSTATE): the
// outage is then the server's refusal, not silence.
//
// holderGone, when not 0, is how long ago the holder's lock stopped being
// live while the attempts since got no answer: they waited for its row.
func waitError(key string, attempts, refused int, elapsed time.Duration, answered bool, lastErr, realErr, cause error, holderGone time.Duration) error {
	e := &Error{Op: "lock", Code: ErrAcquisitionTimeout, Key: key, Err: cause,
		Msg: fmt.Sprintf("lock still held by another owner after %s in %v", plural(attempts, "attempt"), elapsed)}
	switch {
	case !answered && realErr == nil:
		return lastErr
	case !answered && refused == attempts:
		e.Code, e.Err, e.Msg = CodeOf(realErr), realErr, fmt.Sprintf("the server answered all %s in %v with an error (the last below)", plural(attempts, "attempt"), elapsed)
		if attempts == 1 {
			e.Msg = fmt.Sprintf("the server answered the only attempt in %v with an error", elapsed)
		}
	case !answered && refused > 0:
		e.Code, e.Err, e.Msg = CodeOf(realErr), realErr, fmt.Sprintf("no lock after %s in %v: the server answered %d with an error, the others got no answer (the last error below)",
			plural(attempts, "attempt"), elapsed, refused)
	case !answered:
		e.Code, e.Err, e.Msg = CodeOf(realErr), realErr, fmt.Sprintf("no answer from the server to %s in %v", plural(attempts, "attempt"), elapsed)
	case lastErr != nil && holderGone > 0:
		e.Msg = fmt.Sprintf("the holder's lease expired %v ago, but after %s in %v the last attempt was still waiting for its lock row: "+
			"an open transaction keeps it (a txguard Hold in a transaction left open: bound it with idle_in_transaction_session_timeout), or the server is slow",
			holderGone.Round(time.Millisecond), plural(attempts, "attempt"), elapsed)
	case lastErr != nil:
		e.Msg += fmt.Sprintf(" (the last attempt got no answer: %s)", CodeOf(lastErr))
	}
	return e
}

// holderGone is how long ago the holder's lock stopped being live
// (holderEnds, as the last answer said), when the attempts since have got
// no answer (lastErr a NetworkTimeout; 0: not so). A takeover that waits
// that long past the holder's expiry waits for a row lock: an open
// transaction that checked the lease (txguard's Hold), or a slow server.
func holderGone(holderEnds time.Time, lastErr error) time.Duration {
	if holderEnds.IsZero() || CodeOf(lastErr) != ErrNetworkTimeout { // a wait, not a refused connection
		return 0
	}
	return max(time.Since(holderEnds), 0)
}
