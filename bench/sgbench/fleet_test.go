package sgbench

import (
	"context"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/syncguard/syncguard-go/syncguard"
)

func TestDSNWithDatabase(t *testing.T) {
	got, err := DSNWithDatabase("postgres://u:p@127.0.0.1:5432/postgres?sslmode=disable", "syncguard_notify")
	if err != nil || got != "postgres://u:p@127.0.0.1:5432/syncguard_notify?sslmode=disable" {
		t.Fatalf("url form: %q %v", got, err)
	}
	got, _ = DSNWithDatabase("host=db dbname=app user=u", "n")
	if got != "host=db dbname=app user=u dbname=n" {
		t.Fatalf("keyword form: %q", got)
	}
	if _, err := DSNWithDatabase("host=db", "a b"); err == nil {
		t.Fatal("a name that needs quoting was accepted")
	}
}

// The variant that needs Config.NotifyDB says so with ErrNoNotifyDB on a
// syncguard without the field, and sets it (with a pool of its own) on one
// with it.
func TestNotifyDBVariant(t *testing.T) {
	w := &WaitEnv{SQLDriver: "sgbench-none", NotifyDSN: "x"}
	p := &proc{cfg: &syncguard.Config{}}
	err := w.setNotify(p)
	if !HasNotifyDB() {
		if err != ErrNoNotifyDB {
			t.Fatalf("without the field: %v", err)
		}
		return
	}
	// sql.Open fails for an unknown driver: nothing set.
	if err == nil || p.notify != nil {
		t.Fatalf("unknown driver: %v %v", err, p.notify)
	}
}

// readStat parses /proc/<pid>/stat, whose command may contain spaces and
// parentheses; ServerProbe finds no postmaster for a pool that is not a
// local PostgreSQL's.
func TestReadStat(t *testing.T) {
	st, ok := readStat(os.Getpid())
	if !ok || st.ppid != os.Getppid() || st.comm == "" {
		t.Fatalf("readStat(self) = %+v %v", st, ok)
	}
	var nilProbe *ServerProbe
	if nilProbe.Sample() != nil || cpuDelta(nil, map[int]int64{1: 5}) != 0 {
		t.Fatal("a missing probe measures nothing")
	}
	if d := cpuDelta(map[int]int64{1: 10, 2: 5}, map[int]int64{1: 15, 3: 7}); d != 12 {
		t.Fatalf("cpuDelta = %d, want 5 (grown) + 7 (new)", d)
	}
}

func TestFleetTablesRender(t *testing.T) {
	r := &FleetResult[ForeignRow]{Driver: "pgx", Workload: "w7a", Method: "m", Rows: []ForeignRow{
		{Variant: "syncguard", Foreign: 0, HandOffsPer10s: 790, HandOffRatio: 1, ServerUsPerHandOff: 3200, ServerCPURatio: 1},
		{Variant: "syncguard", Foreign: 600, HandOffsPer10s: 300, HandOffRatio: 0.38, ServerUsPerHandOff: 49000, ServerCPURatio: 15.3},
	}, Targets: []Target{{Name: "w7a syncguard: hand-offs", Value: 0.38, Goal: ">= 0.8x"}}}
	var md, txt strings.Builder
	Markdown(&md, []any{r})
	Print(&txt, r)
	for _, want := range []string{"#### [pgx] w7a: a hot key's hand-offs", "| syncguard | 600 | 300 | 0.38 |", "| 49000 | 15.30 |"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("markdown lacks %q:\n%s", want, md.String())
		}
	}
	if !strings.Contains(txt.String(), "[NOT MET] w7a syncguard: hand-offs") || len(TargetsOf(r)) != 1 {
		t.Errorf("targets not shown:\n%s", txt.String())
	}
	for _, row := range []tableRow{OwnWaitersRow{}, IdleRow{}} {
		_, cols, _ := row.layout()
		if len(cols) != len(row.cells()) {
			t.Errorf("%T: %d columns, %d cells", row, len(cols), len(row.cells()))
		}
	}
}

// runLoops counts only the holds whose fn starts in the measured window.
func TestRunLoopsCountsTheWindow(t *testing.T) {
	var n atomic.Int64
	l := &fakeLocker{n: &n}
	g := &loopGroup{key: "k", procs: []*proc{{locker: l}}, hold: 5 * time.Millisecond, opts: &syncguard.LockOptions{TTL: time.Second}}
	runLoops(context.Background(), []*loopGroup{g}, 50*time.Millisecond, 100*time.Millisecond, nil)
	if g.st.Acquired < 1 || g.st.Acquired > 21 || int64(g.st.Acquired) > n.Load() || g.st.Errors != 0 {
		t.Fatalf("acquired %d of %d calls, errors %d", g.st.Acquired, n.Load(), g.st.Errors)
	}
}

type fakeLocker struct{ n *atomic.Int64 }

func (f *fakeLocker) Acquire(context.Context, string, time.Duration) (syncguard.AcquireResult, error) {
	f.n.Add(1)
	return syncguard.AcquireResult{OK: true, LockID: "AAAAAAAAAAAAAAAAAAAAAA"}, nil
}
func (f *fakeLocker) Release(context.Context, string) (syncguard.ReleaseResult, error) {
	return syncguard.ReleaseResult{OK: true}, nil
}
func (f *fakeLocker) Extend(context.Context, string, time.Duration) (syncguard.ExtendResult, error) {
	return syncguard.ExtendResult{OK: true}, nil
}
