package ha

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/syncguard/syncguard-go/syncguard"
	"github.com/syncguard/syncguard-go/tests/pgtest/history"
	"github.com/syncguard/syncguard-go/tests/pgtest/linear"
)

// The report path of the linearizability checker, on a hand-built history
// of what asynchronous replication does in a failover (the long run, make
// ha, shows it for real): an acquire acknowledged by the old primary never
// reached the standby, so the promoted standby hands out the same fence
// again. With the acquire replicated (synchronous), the next fence is
// larger and the checker accepts the history.
func TestReportShowsFenceReuseAsCounterexample(t *testing.T) {
	for _, c := range []struct {
		name      string
		nextFence string
		illegal   bool
	}{
		{"asynchronous", "000000000000007", true},
		{"synchronous", "000000000000008", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := &runner{o: RunOptions{Logf: t.Logf}, hist: history.New(), rep: &Report{Async: c.illegal}}
			now := time.Now()
			at := func(ms int) time.Time { return now.Add(time.Duration(ms) * time.Millisecond) }
			res := func(lock, fence string, startMs int) syncguard.AcquireResult {
				return syncguard.AcquireResult{OK: true, LockID: lock, Fence: syncguard.Fence(fence), ExpiresAt: at(startMs).Add(hotTTL)}
			}
			a := r.hist.Begin("ha-hot-0", "pq-lease-0", res("AAAAAAAAAAAAAAAAAAAAAA", "000000000000007", 5), hotTTL, at(0), at(10))
			r.hist.ReleaseSent(a, at(100)) // the primary dies: the release errs
			r.hist.Ended(a, "release:error ServiceUnavailable", false)
			// After the failover, well after a's lock expired.
			r.hist.Begin("ha-hot-0", "pgx-lease-1", res("BBBBBBBBBBBBBBBBBBBBBB", c.nextFence, 5000), hotTTL, at(4990), at(5010))
			r.addLinear(linear.Check(r.hist.Ops(), linear.Options{Dir: t.TempDir()}))
			sum := r.rep.Summary()
			if got := strings.Contains(sum, "linearizability") && strings.Contains(sum, "VIOLATION"); got != c.illegal {
				t.Fatalf("violation reported: %v, want %v:\n%s", got, c.illegal, sum)
			}
			if c.illegal && (r.rep.ViolationsByRule()[linear.Rule] != 1 || !strings.Contains(sum, "counterexample: "+r.rep.Linear.Files["lock ha-hot-0"])) {
				t.Errorf("report:\n%s", sum)
			}
			if !c.illegal && len(r.rep.Violations) != 0 {
				t.Errorf("violations: %v", fmt.Sprint(r.rep.Violations))
			}
		})
	}
}
