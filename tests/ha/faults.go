package ha

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// PostmasterPID reads n's postmaster.pid.
func (n *Node) PostmasterPID() (int, error) {
	fh, err := os.Open(filepath.Join(n.PGData, "postmaster.pid"))
	if err != nil {
		return 0, err
	}
	defer fh.Close()
	sc := bufio.NewScanner(fh)
	if !sc.Scan() {
		return 0, fmt.Errorf("ha: %s: empty postmaster.pid", n.Name)
	}
	return strconv.Atoi(strings.TrimSpace(sc.Text()))
}

// decisionWindow is how long after a postmaster crash the monitor may
// still decide to fail over: a missed report (NodeUnhealthy) after a failed
// health check, plus slack for a loaded machine.
func (f *Formation) decisionWindow() time.Duration {
	t := f.Timeouts
	return t.NodeUnhealthy + t.HealthCheckPeriod + t.HealthCheckTimeout + 3*time.Second
}

// Running reports whether n's pg_autoctl is running.
func (n *Node) Running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil {
		return false
	}
	select {
	case <-n.done:
		return false
	default:
		return true
	}
}

// KillPostmaster sends SIGKILL to n's postmaster (a crash of the database
// server; its keeper survives and restarts it) and returns when.
func (f *Formation) KillPostmaster(n *Node) (time.Time, error) {
	pid, err := n.PostmasterPID()
	if err != nil {
		return time.Time{}, err
	}
	at := time.Now()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return time.Time{}, fmt.Errorf("ha: kill -9 %d (%s postmaster): %w", pid, n.Name, err)
	}
	return at, nil
}

// KillNode sends SIGKILL to n's whole process group: keeper, postmaster and
// backends, as when the machine dies. StartNode brings it back.
func (f *Formation) KillNode(n *Node) (time.Time, error) {
	n.mu.Lock()
	cmd, done := n.cmd, n.done
	n.mu.Unlock()
	if cmd == nil {
		return time.Time{}, fmt.Errorf("ha: %s is not running", n.Name)
	}
	at := time.Now()
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); err != nil {
		return time.Time{}, fmt.Errorf("ha: kill -9 -%d (%s): %w", cmd.Process.Pid, n.Name, err)
	}
	<-done
	// Backends notice the postmaster's death on their own; wait until the
	// data directory is free so that a restart can take it.
	for i := 0; i < 100; i++ {
		if pid, err := n.PostmasterPID(); err != nil || syscall.Kill(pid, 0) != nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	return at, nil
}

// StartNode restarts the keeper of a node stopped by KillNode.
func (f *Formation) StartNode(n *Node) error { return f.startNode(n) }

// Switchover asks the monitor for a planned failover (what `pg_autoctl
// perform switchover` does) and returns when it was requested.
func (f *Formation) Switchover(ctx context.Context) (time.Time, error) {
	at := time.Now()
	_, err := f.mon.ExecContext(ctx, "SELECT pgautofailover.perform_failover('default', 0)")
	return at, err
}

// StallStandby stops (SIGSTOP) the WAL receiver of standby n: it stays
// connected but acknowledges nothing, so commits waiting for it wait. The
// returned function resumes it.
func (f *Formation) StallStandby(n *Node) (resume func(), err error) {
	pm, err := n.PostmasterPID()
	if err != nil {
		return nil, err
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !strings.Contains(string(cmdline), "walreceiver") {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...
		fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		if len(fields) < 2 || fields[1] != strconv.Itoa(pm) {
			continue
		}
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			return nil, err
		}
		return func() { _ = syscall.Kill(pid, syscall.SIGCONT) }, nil
	}
	return nil, fmt.Errorf("ha: no walreceiver under %s's postmaster %d", n.Name, pm)
}

// SetReplicationQuorum sets n's replication-quorum (pg_autoctl set node
// replication-quorum): false makes it an asynchronous standby, and with
// two nodes the primary's synchronous_standby_names becomes empty.
func (f *Formation) SetReplicationQuorum(ctx context.Context, n *Node, quorum bool) error {
	if out, err := f.autoctlCmd(ctx, "set", "node", "replication-quorum", strconv.FormatBool(quorum), "--pgdata", n.PGData); err != nil {
		return fmt.Errorf("ha: pg_autoctl set node replication-quorum %v on %s: %w\n%s", quorum, n.Name, err, out)
	}
	return nil
}
