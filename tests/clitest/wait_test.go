//go:build unix

package clitest

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Waiting runs take the key in arrival order: run waits with the library's
// Lock, queued, so a release hands the key to the first waiter, and
// --wait forever keeps its place as long as it waits (issue 28).
func TestRunWaitersInArrivalOrder(t *testing.T) {
	t.Parallel()
	d := dsn(t)
	b, k, res := holdKey(t, d)
	order := filepath.Join(t.TempDir(), "order")
	waiter := func(name, wait string) *proc {
		p := start(t, env(d), "run", "--key", k, "--wait", wait, "--verbose", "--", "sh", "-c", fmt.Sprintf("echo %s >> %s", name, order))
		p.waitStderr(t, "is busy") // its first attempt is answered: it is queued
		return p
	}
	first := waiter("first", "forever")
	second := waiter("second", "1m")
	if _, err := b.Release(ctxT(t), res.LockID); err != nil {
		t.Fatal(err)
	}
	wantCode(t, first.wait(t, time.Minute), 0)
	wantCode(t, second.wait(t, time.Minute), 0)
	if got, err := os.ReadFile(order); err != nil || string(got) != "first\nsecond\n" {
		t.Errorf("the waiters ran in the order %q (%v), want first, then second", got, err)
	}
}
