package syncguard

import (
	"testing"
	"time"
)

// The timing arithmetic of the lock helper and of leases, tested on the
// unexported functions themselves. Their effect on Lock, WithLock and
// leases is tested through the public API in helper_test.go and
// lease_test.go (package syncguard_test).

func TestAcquireDelaysAreRandomized(t *testing.T) {
	c, _ := (&LockOptions{}).resolve()
	seen := map[time.Duration]bool{}
	for range 50 {
		seen[c.delay(3)] = true
	}
	if len(seen) < 10 {
		t.Fatalf("equal jitter must randomize delays; 50 draws gave %d values", len(seen))
	}
}

func TestAcquireHugeBackoffDoesNotOverflow(t *testing.T) {
	c, _ := (&LockOptions{Acquisition: AcquisitionOptions{RetryDelay: time.Duration(1<<62 + 1)}}).resolve()
	for _, n := range []int{1, 2, 64, 1000} {
		if d := c.delay(n); d < 0 {
			t.Fatalf("delay(%d) overflowed: %v", n, d)
		}
	}
}

func TestScheduleFromSendTime(t *testing.T) {
	sent := time.Unix(1000, 0)
	lostAt, extendAt := schedule(sent, 30*time.Second)
	// granted 29.999s, margin min(2.9999s, 1s) = 1s
	if got := lostAt.Sub(sent); got != 28999*time.Millisecond {
		t.Errorf("lostAt: sent + ttl - 1ms - 1s margin = 28.999s, got %v", got)
	}
	if got := extendAt.Sub(sent); got != 9999666666*time.Nanosecond {
		t.Errorf("extendAt: a third of the granted lifetime, got %v", got)
	}
	lostAt, _ = schedule(sent, time.Second)
	if got := lostAt.Sub(sent); got != 999*time.Millisecond-99900*time.Microsecond {
		t.Errorf("short ttl margin is a tenth: got %v", got)
	}
}
