package syncguard_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/syncguard/syncguard-go/syncguard"
	"github.com/syncguard/syncguard-go/syncguardtest"
)

// --- shared test helpers for the helper, lease and telemetry tests.

// The lock helper's defaults, as documented on LockOptions and
// AcquisitionOptions.
const (
	defaultTTL            = 30 * time.Second
	defaultRetryDelay     = 100 * time.Millisecond
	defaultAcquireTimeout = 5 * time.Second
)

// sentinels is each Code's sentinel, as documented on the Err variables.
var sentinels = map[syncguard.Code]error{
	syncguard.ErrServiceUnavailable: syncguard.ErrServiceUnavailable,
	syncguard.ErrAuthFailed:         syncguard.ErrAuthFailed,
	syncguard.ErrInvalidArgument:    syncguard.ErrInvalidArgument,
	syncguard.ErrRateLimited:        syncguard.ErrRateLimited,
	syncguard.ErrNetworkTimeout:     syncguard.ErrNetworkTimeout,
	syncguard.ErrAcquisitionTimeout: syncguard.ErrAcquisitionTimeout,
	syncguard.ErrAborted:            syncguard.ErrAborted,
	syncguard.ErrInternal:           syncguard.ErrInternal,
}

func requireCode(t *testing.T, err error, code syncguard.Code) *syncguard.Error {
	t.Helper()
	var e *syncguard.Error
	if !errors.As(err, &e) || e.Code != code || !errors.Is(err, sentinels[code]) {
		t.Fatalf("want a *Error with code %s, got %T %v", code, err, err)
	}
	return e
}

// hold takes key on b for an hour, as another process would.
func hold(t *testing.T, b *syncguardtest.Backend, key string) syncguard.AcquireResult {
	t.Helper()
	r, err := b.Acquire(context.Background(), key, time.Hour)
	if err != nil || !r.OK {
		t.Fatalf("setup: holding %q: %+v %v", key, r, err)
	}
	return r
}

// sendTimes makes b record when each call of op is sent (its hook, which
// it replaces, runs then) and returns the recorded times, in order.
func sendTimes(b *syncguardtest.Backend, op syncguardtest.Op) func() []time.Time {
	var mu sync.Mutex
	var times []time.Time
	b.SetHook(func(_ context.Context, c syncguardtest.Call) error {
		if c.Op == op {
			mu.Lock()
			defer mu.Unlock()
			times = append(times, time.Now())
		}
		return nil
	})
	return func() []time.Time {
		mu.Lock()
		defer mu.Unlock()
		return append([]time.Time(nil), times...)
	}
}

// serverExpiry returns the expiry of lockID's row on b, which must be live.
func serverExpiry(t *testing.T, b *syncguardtest.Backend, lockID string) time.Time {
	t.Helper()
	info, err := b.LookupID(context.Background(), lockID)
	if err != nil || info == nil {
		t.Fatalf("no live row for the lease on the server: %+v %v", info, err)
	}
	return info.ExpiresAt
}

// failOp is a hook that fails every call of op with err.
func failOp(op syncguardtest.Op, err error) func(context.Context, syncguardtest.Call) error {
	return func(_ context.Context, c syncguardtest.Call) error {
		if c.Op == op {
			return err
		}
		return nil
	}
}

// syncBuffer is a bytes.Buffer safe for the concurrent writes of a logger.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func (s *syncBuffer) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.b.Reset()
}

func captureLogger() (*slog.Logger, *syncBuffer) {
	buf := &syncBuffer{}
	return slog.New(slog.NewJSONHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug})), buf
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// gaps returns the durations between consecutive times.
func gaps(ts []time.Time) []time.Duration {
	var out []time.Duration
	for i := 1; i < len(ts); i++ {
		out = append(out, ts[i].Sub(ts[i-1]))
	}
	return out
}

func ms(n ...int) []time.Duration {
	out := make([]time.Duration, len(n))
	for i, v := range n {
		out[i] = time.Duration(v) * time.Millisecond
	}
	return out
}

var errFn = errors.New("fn failed")
