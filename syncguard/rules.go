package syncguard

import (
	"errors"
	"fmt"
	"time"

	"github.com/syncguard/syncguard-go/internal/rules"
)

// The spec's rules (internal/rules) applied to a Backend's input before any
// I/O: a broken rule is an InvalidArgument *Error.

// Fence is a fencing token: a 15-digit, zero-padded decimal string that
// increases strictly with every successful acquire of the same key. Because
// every fence has the same width, fences compare correctly as strings:
//
//	if newFence > lastSeenFence { ... }
type Fence string

// Int64 parses the fence as a number. It fails with InvalidArgument unless
// f is exactly 15 decimal digits.
func (f Fence) Int64() (int64, error) {
	n, err := rules.ParseFence(string(f))
	if err != nil {
		return 0, ruleError("fence", err)
	}
	return n, nil
}

// HashKey is the spec's sanitized identifier of a key or lockId: 24
// lowercase hex characters, computed from the NFC form of s. Log it
// instead of the raw value; LockInfo, telemetry.LockEvent and error messages carry
// only this form. It is for logs and UIs, not for security.
func HashKey(s string) string { return rules.HashKey(s) }

// ruleError reports a broken rule as an InvalidArgument *Error of op.
func ruleError(op string, err error) *Error {
	var ae *rules.ArgError
	if errors.As(err, &ae) {
		return invalidArg(op, ae.Msg)
	}
	return invalidArg(op, err.Error())
}

// checkKey normalizes and validates a key (rules.DeriveKey).
func checkKey(op, key string) (rules.Key, *Error) {
	k, err := rules.DeriveKey(key)
	if err != nil {
		e := ruleError(op, err)
		e.Key = key
		return rules.Key{}, e
	}
	return k, nil
}

func checkLockID(op, id string) *Error {
	if err := rules.ValidateLockID(id); err != nil {
		e := ruleError(op, err)
		e.LockID = id
		return e
	}
	return nil
}

// ttlMillis converts ttl to whole milliseconds, rounding down: the spec
// counts milliseconds, so 1.9 ms is 1 ms. Less than 1 ms is InvalidArgument.
func ttlMillis(op string, ttl time.Duration) (int64, *Error) {
	ms := ttl.Milliseconds()
	if ms < 1 {
		return 0, invalidArg(op, fmt.Sprintf("ttl must be at least 1ms, got %v", ttl))
	}
	return ms, nil
}
