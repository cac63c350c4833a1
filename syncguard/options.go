package syncguard

import (
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"time"
)

// Defaults of the lock helper: the reference implementation's.
const (
	defaultTTL            = 30 * time.Second
	defaultRetryDelay     = 100 * time.Millisecond
	defaultAcquireTimeout = 5 * time.Second
)

// AcquisitionOptions are the limits of waiting for a contended key in Lock
// and WithLock; the zero value means the reference implementation's
// defaults. On a Locker with a queue (a *Backend) waiters also attempt when the key is
// released or its holder's lock expires, and take the key in arrival order
// (but for a waiter far back that comes near late: it keeps its place, not
// its turn; "Waiting" in docs/design.md); those attempts are not retries, and one
// queued behind a live lock makes no scheduled retries after the first 2 s
// of its wait unless MaxRetries is set.
type AcquisitionOptions struct {
	// MaxRetries is the number of scheduled retries after the first
	// attempt; when they have run out the acquisition gives up. Default: no
	// limit, so Timeout (or ctx) is the wait limit (the reference
	// implementation's default is 10). Negative: a single attempt, no wait.
	MaxRetries int
	// RetryDelay is the base delay between attempts. Default 100 ms.
	RetryDelay time.Duration
	// Backoff says how the delay grows: "exponential" (the default) waits
	// RetryDelay * 2^(n-1) before retry n (without MaxRetries, at most 1 s
	// or RetryDelay), "fixed" waits RetryDelay every time. Any other value fails Lock with ErrInvalidArgument.
	Backoff string
	// Jitter randomizes each delay d: "equal" (the default) waits
	// d/2 + rand*d/2, "full" waits rand*d, "none" waits exactly d. Any
	// other value fails Lock with ErrInvalidArgument.
	Jitter string
	// Timeout bounds the whole acquisition, attempts and waits together.
	// A wait never extends past it. Default 5 s. Negative: no bound but
	// ctx (a campaign, a job that waits its turn however long).
	Timeout time.Duration
	// FailFast returns an outage's error (a retryable code:
	// ServiceUnavailable, RateLimited, NetworkTimeout) at once. By default waiting rides it out within
	// Timeout, then ends busy (AcquisitionTimeout) if any attempt got an
	// answer, else with the last real outage error.
	FailFast bool
}

// LockOptions configures Lock and WithLock. A nil *LockOptions, or the zero
// value, means the defaults documented on each field.
type LockOptions struct {
	// TTL is the lock's time to live, and with AutoExtend what each
	// extension adds, in whole milliseconds. Default 30 s.
	TTL time.Duration
	// Acquisition configures the retries on contention.
	Acquisition AcquisitionOptions
	// AutoExtend keeps the lock alive while it is held (see Lease), until
	// the lease is released or lost or the ctx of Lock or WithLock is done;
	// a loss closes Lease.Done with an ErrLockLost cause, and WithLock
	// cancels fn's context with it.
	AutoExtend bool
	// ReleaseTimeout bounds the release by WithLock after fn and by
	// Lease.Close, detached from the caller's cancellation (a cancelled
	// caller still frees the lock at once). Default: the *Backend's
	// Config.ReleaseTimeout (through wrappers), else 5 s.
	ReleaseTimeout time.Duration
	// OnReleaseError receives the error of a release by WithLock or
	// Lease.Close, which cannot return it. A release that finds the lock
	// gone (ReleaseResult.OK false) is not an error. Default: an Error
	// record on Logger with the source, the code and the key's hash.
	OnReleaseError func(err error, info ReleaseErrorInfo)
	// Identity is stored as this lock's holder, in place of the Backend's
	// Config.Identity (see there). Default: Config.Identity.
	Identity string
	// OnAttempt, if set, is called after each acquire attempt of Lock and
	// WithLock, on the caller's goroutine, with its result (tracing, a
	// progress line). Default: none.
	OnAttempt func(res AcquireResult, err error)
	// OnExtend, if set, is called after each extension of the lease that
	// the server confirmed (AutoExtend's and Lease.Extend's), with its
	// result, on the goroutine that extended. Default: none.
	OnExtend func(res ExtendResult)
	// Logger receives the default OnReleaseError records and warnings about
	// failed auto-extensions. Default: the backend's LeaseLogger() when it
	// has one (syncguardtest's discards), else slog.Default().
	Logger *slog.Logger
	// Tracer, if set, observes this call's wait (each attempt), holding
	// and end (see Tracer). Default: the Locker's, as As finds a
	// Tracer() method through wrappers (a *Backend's Config.Tracer).
	Tracer Tracer
}

func (o *LockOptions) resolve() (lockConfig, error) {
	var c lockConfig
	if o != nil {
		c.LockOptions = *o
	}
	c.maxRetries = c.Acquisition.MaxRetries
	if err := checkIdentity("lock", "Identity", c.Identity); err != nil {
		return c, err
	}
	for _, d := range []struct {
		name string
		v    *time.Duration
		def  time.Duration
	}{
		{"TTL", &c.TTL, defaultTTL},
		{"Acquisition.RetryDelay", &c.Acquisition.RetryDelay, defaultRetryDelay},
		{"ReleaseTimeout", &c.ReleaseTimeout, 0}, // 0: the backend's, see Lock
	} {
		if *d.v < 0 {
			return c, invalidArg("lock", fmt.Sprintf("%s must not be negative, got %v", d.name, *d.v))
		}
		if *d.v == 0 {
			*d.v = d.def
		}
	}
	if c.Acquisition.Timeout == 0 {
		c.Acquisition.Timeout = defaultAcquireTimeout
	}
	switch {
	case c.maxRetries == 0:
		c.maxRetries = math.MaxInt // Timeout (and ctx) is the limit
	case c.maxRetries < 0:
		c.maxRetries = 0
	}
	switch c.Acquisition.Backoff {
	case "":
		c.Acquisition.Backoff = backoffExponential
	case backoffExponential, backoffFixed:
	default:
		return c, invalidArg("lock", fmt.Sprintf("unknown Acquisition.Backoff %q (want %q or %q)", c.Acquisition.Backoff, backoffExponential, backoffFixed))
	}
	switch c.Acquisition.Jitter {
	case "":
		c.Acquisition.Jitter = jitterEqual
	case jitterEqual, jitterFull, jitterNone:
	default:
		return c, invalidArg("lock", fmt.Sprintf("unknown Acquisition.Jitter %q (want %q, %q or %q)", c.Acquisition.Jitter, jitterEqual, jitterFull, jitterNone))
	}
	return c, nil // Logger and OnReleaseError: see Lock
}

// Values of AcquisitionOptions.Backoff and .Jitter, the spec's words.
const (
	backoffExponential = "exponential"
	backoffFixed       = "fixed"
	jitterEqual        = "equal"
	jitterFull         = "full"
	jitterNone         = "none"
)

// lockConfig is LockOptions with defaults applied, and maxRetries the
// number of scheduled retries (math.MaxInt: no limit; 0: one attempt).
type lockConfig struct {
	LockOptions
	maxRetries int
	// lockerTracer: Tracer is the Locker's own, which traces its Acquire
	// calls (a polling wait's attempts) itself.
	lockerTracer bool
}

// ReleaseErrorInfo tells OnReleaseError which lock a failed release was for.
type ReleaseErrorInfo struct {
	// Key and LockID are raw values. The lockId lets its bearer release the
	// lock and keys may hold personal data: log HashKey of them instead.
	Key    string
	LockID string
	Source string // "withLock" (the release after fn in WithLock) or "close" (Lease.Close)
}

const (
	maxDelay          = time.Duration(1 << 62)
	unboundedMaxDelay = time.Second // the retry delay's cap without MaxRetries
)

// delay returns the wait before retry n (1-based).
func (c *lockConfig) delay(n int) time.Duration {
	d := c.Acquisition.RetryDelay
	if c.Acquisition.Backoff == backoffExponential {
		for i := 1; i < n && d < maxDelay; i++ {
			d *= 2
		}
	}
	d = min(d, maxDelay) // no overflow below
	if c.maxRetries == math.MaxInt {
		d = min(d, max(c.Acquisition.RetryDelay, unboundedMaxDelay))
	}
	switch c.Acquisition.Jitter {
	case jitterEqual:
		d = d/2 + rand.N(d-d/2+1)
	case jitterFull:
		d = rand.N(d + 1)
	}
	return d
}
