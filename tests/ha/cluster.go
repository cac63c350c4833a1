package ha

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the monitor connection

	"github.com/syncguard/syncguard-go/tests/pgtest/pginstall"
)

// ErrUnavailable is wrapped by Start's error when pg_auto_failover is not
// installed (no pg_autoctl, or no pgautofailover extension next to a
// PostgreSQL server).
var ErrUnavailable = errors.New("ha: pg_auto_failover is not installed")

// Timeouts are the failover manager's timing settings: the monitor's
// pgautofailover.* GUCs and the keepers' [timeout] section.
//
// How long a failover takes depends on how the primary dies:
//
//   - the postmaster dies and its keeper survives (kill -9 of the
//     postmaster, an OOM kill): the keeper reports "Postgres is not
//     running" at its next 1 s loop and the monitor fails over at once;
//     the standby is read-write about 2-3 s after the crash, whatever the
//     timeouts below;
//   - the whole node dies (machine, VM or container gone): the monitor
//     notices through failed health checks (HealthCheckPeriod,
//     HealthCheckTimeout, HealthCheckMaxRetries x HealthCheckRetryDelay),
//     waits NodeUnhealthy since the node's last report, then
//     PrimaryDemote for the old primary to demote itself, and only then
//     promotes: about NodeUnhealthy + PrimaryDemote + 1 s.
//
// PrimaryDemote must exceed NetworkPartition (the keeper of a primary cut
// off from the monitor and its standbys demotes it after that long), so
// that a partitioned old primary has stopped accepting writes before the
// standby is promoted.
type Timeouts struct {
	HealthCheckPeriod     time.Duration // pgautofailover.health_check_period; default 5 s
	HealthCheckTimeout    time.Duration // pgautofailover.health_check_timeout; default 5 s
	HealthCheckMaxRetries int           // pgautofailover.health_check_max_retries; default 2
	HealthCheckRetryDelay time.Duration // pgautofailover.health_check_retry_delay; default 2 s
	NodeUnhealthy         time.Duration // pgautofailover.node_considered_unhealthy_timeout; default 20 s
	PrimaryDemote         time.Duration // pgautofailover.primary_demote_timeout; default 30 s
	NetworkPartition      time.Duration // keeper timeout.network_partition_timeout; default 20 s
}

// DefaultTimeouts are pg_auto_failover 2.0's defaults.
var DefaultTimeouts = Timeouts{
	HealthCheckPeriod:     5 * time.Second,
	HealthCheckTimeout:    5 * time.Second,
	HealthCheckMaxRetries: 2,
	HealthCheckRetryDelay: 2 * time.Second,
	NodeUnhealthy:         20 * time.Second,
	PrimaryDemote:         30 * time.Second,
	NetworkPartition:      20 * time.Second,
}

// FastTimeouts are the tuned settings the tests use (see docs/ha.md): a
// dead node is noticed within about 3 s and the standby promoted about 5 s
// later. They keep PrimaryDemote above NetworkPartition.
var FastTimeouts = Timeouts{
	HealthCheckPeriod:     time.Second,
	HealthCheckTimeout:    time.Second,
	HealthCheckMaxRetries: 1,
	HealthCheckRetryDelay: 500 * time.Millisecond,
	NodeUnhealthy:         3 * time.Second,
	PrimaryDemote:         5 * time.Second,
	NetworkPartition:      3 * time.Second,
}

func (t Timeouts) String() string {
	return fmt.Sprintf("health_check_period=%v health_check_timeout=%v health_check_max_retries=%d health_check_retry_delay=%v "+
		"node_considered_unhealthy_timeout=%v primary_demote_timeout=%v network_partition_timeout=%v",
		t.HealthCheckPeriod, t.HealthCheckTimeout, t.HealthCheckMaxRetries, t.HealthCheckRetryDelay,
		t.NodeUnhealthy, t.PrimaryDemote, t.NetworkPartition)
}

// Options configure Start.
type Options struct {
	// Async makes replication asynchronous: both nodes are created with
	// --replication-quorum false, so synchronous_standby_names stays
	// empty and a commit is acknowledged before any standby has it.
	// Default false: the standby is synchronous (ANY 1 (...)).
	Async bool
	// Timeouts; the zero value means FastTimeouts.
	Timeouts Timeouts
	// Logf receives progress lines; default none.
	Logf func(format string, args ...any)
}

// Node is one PostgreSQL node of the formation (or the monitor).
type Node struct {
	Name   string
	Port   int
	PGData string
	log    string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd exits
}

// Formation is a running pg_auto_failover formation on this machine: a
// monitor and two nodes on free local ports, run as the postgres OS user
// when the process is root, in a fresh directory under os.TempDir().
type Formation struct {
	Dir      string
	Monitor  *Node
	Nodes    []*Node
	Timeouts Timeouts
	Async    bool

	autoctl string
	binDir  string
	cred    *syscall.Credential
	env     []string
	logf    func(string, ...any)
	mon     *sql.DB
}

// Available reports why a formation cannot be started here (nil: it can).
func Available() error {
	_, _, err := findBinaries()
	return err
}

func findBinaries() (autoctl, binDir string, err error) {
	autoctl, err = exec.LookPath("pg_autoctl")
	if err != nil {
		return "", "", fmt.Errorf("%w: no pg_autoctl on PATH (Debian: apt-get install pg-auto-failover-cli postgresql-15-auto-failover)", ErrUnavailable)
	}
	dirs := pginstall.BinDirs()
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "pg_ctl")); err != nil {
			continue
		}
		if _, err := os.Stat(filepath.Join(d, "..", "lib", "pgautofailover.so")); err != nil {
			continue
		}
		return autoctl, d, nil
	}
	return "", "", fmt.Errorf("%w: no PostgreSQL server with the pgautofailover extension in %v (Debian: apt-get install postgresql-15-auto-failover)", ErrUnavailable, dirs)
}

// Start creates and starts a formation: the monitor, node1 (the first
// primary) and node2 (its standby), and waits until node1 is primary and
// node2 secondary. Stop it with Stop.
func Start(ctx context.Context, opts Options) (_ *Formation, err error) {
	autoctl, binDir, err := findBinaries()
	if err != nil {
		return nil, err
	}
	f := &Formation{autoctl: autoctl, binDir: binDir, Timeouts: opts.Timeouts, Async: opts.Async, logf: opts.Logf}
	if f.Timeouts == (Timeouts{}) {
		f.Timeouts = FastTimeouts
	}
	if f.logf == nil {
		f.logf = func(string, ...any) {}
	}
	if f.cred, err = pginstall.Credential(); err != nil {
		return nil, fmt.Errorf("ha: %w", err)
	}
	if f.Dir, err = os.MkdirTemp("", "syncguard-ha-*"); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			err = fmt.Errorf("%w%s", err, f.logTails(30))
			_ = f.Stop()
		}
	}()
	if err := os.Chmod(f.Dir, 0o700); err != nil {
		return nil, err
	}
	if f.cred != nil {
		if err := os.Chown(f.Dir, int(f.cred.Uid), int(f.cred.Gid)); err != nil {
			return nil, err
		}
	}
	// pg_autoctl keeps its configuration and state under XDG_CONFIG_HOME
	// and XDG_DATA_HOME: a private home keeps formations apart.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PG") && !strings.HasPrefix(kv, "HOME=") && !strings.HasPrefix(kv, "XDG_") && !strings.HasPrefix(kv, "PATH=") {
			f.env = append(f.env, kv)
		}
	}
	f.env = append(f.env, "HOME="+f.Dir, "XDG_CONFIG_HOME="+filepath.Join(f.Dir, "config"),
		"XDG_DATA_HOME="+filepath.Join(f.Dir, "share"), "XDG_RUNTIME_DIR="+filepath.Join(f.Dir, "run"),
		"PATH="+binDir+":/usr/bin:/bin", "PG_CONFIG="+filepath.Join(binDir, "pg_config"))

	ports, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	f.Monitor = f.newNode("monitor", ports[0])
	f.Nodes = []*Node{f.newNode("node1", ports[1]), f.newNode("node2", ports[2])}

	t0 := time.Now()
	if out, err := f.autoctlCmd(ctx, "create", "monitor", "--pgdata", f.Monitor.PGData, "--pgport", strconv.Itoa(f.Monitor.Port),
		"--pgctl", filepath.Join(binDir, "pg_ctl"), "--hostname", "127.0.0.1", "--auth", "trust", "--no-ssl"); err != nil {
		return nil, fmt.Errorf("ha: pg_autoctl create monitor: %w\n%s", err, out)
	}
	if err := f.startNode(f.Monitor); err != nil {
		return nil, err
	}
	if f.mon, err = sql.Open("pgx", fmt.Sprintf("postgres://postgres@127.0.0.1:%d/pg_auto_failover?sslmode=disable&connect_timeout=2", f.Monitor.Port)); err != nil {
		return nil, err
	}
	f.mon.SetMaxOpenConns(2)
	if err := f.waitFor(ctx, "the monitor", 60*time.Second, func(ctx context.Context) (bool, error) {
		return f.mon.PingContext(ctx) == nil, nil
	}); err != nil {
		return nil, err
	}
	if err := f.tuneMonitor(ctx); err != nil {
		return nil, err
	}
	for i, n := range f.Nodes {
		if err := f.createNode(ctx, n); err != nil {
			return nil, err
		}
		want := map[string]string{"node1": "single"}
		if i == 1 {
			want = map[string]string{"node1": "primary", "node2": "secondary"}
		}
		if err := f.waitStates(ctx, 120*time.Second, want); err != nil {
			return nil, err
		}
	}
	f.logf("ha: formation up in %v (%s replication; monitor :%d, node1 :%d, node2 :%d; %s)", time.Since(t0).Round(time.Millisecond),
		map[bool]string{false: "synchronous", true: "asynchronous"}[f.Async], f.Monitor.Port, f.Nodes[0].Port, f.Nodes[1].Port, f.Dir)
	return f, nil
}

func (f *Formation) newNode(name string, port int) *Node {
	return &Node{Name: name, Port: port, PGData: filepath.Join(f.Dir, name), log: filepath.Join(f.Dir, name+".log")}
}

// MonitorURI is the URI keepers use to reach the monitor.
func (f *Formation) MonitorURI() string {
	return fmt.Sprintf("postgres://autoctl_node@127.0.0.1:%d/pg_auto_failover?sslmode=disable", f.Monitor.Port)
}

func (f *Formation) createNode(ctx context.Context, n *Node) error {
	args := []string{"create", "postgres", "--pgdata", n.PGData, "--pgport", strconv.Itoa(n.Port),
		"--pgctl", filepath.Join(f.binDir, "pg_ctl"), "--hostname", "127.0.0.1", "--listen", "127.0.0.1",
		"--name", n.Name, "--monitor", f.MonitorURI(), "--auth", "trust", "--no-ssl"}
	if f.Async {
		args = append(args, "--replication-quorum", "false")
	}
	if out, err := f.autoctlCmd(ctx, args...); err != nil {
		return fmt.Errorf("ha: pg_autoctl create postgres %s: %w\n%s", n.Name, err, out)
	}
	secs := strconv.Itoa(int(f.Timeouts.NetworkPartition.Round(time.Second) / time.Second))
	if out, err := f.autoctlCmd(ctx, "config", "set", "--pgdata", n.PGData, "timeout.network_partition_timeout", secs); err != nil {
		return fmt.Errorf("ha: pg_autoctl config set %s: %w\n%s", n.Name, err, out)
	}
	// The tests kill processes, never the machine: the page cache survives,
	// so fsync buys nothing here and costs a shared machine a lot.
	// Synchronous replication still waits for the standby's flush report.
	if err := appendFile(filepath.Join(n.PGData, "postgresql.conf"), "\n# syncguard tests/ha\nfsync = off\nfull_page_writes = off\n"); err != nil {
		return err
	}
	return f.startNode(n)
}

func appendFile(path, s string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if strings.Contains(string(b), s) {
		return nil
	}
	fh, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = fh.WriteString(s)
	return errors.Join(err, fh.Close())
}

// tuneMonitor applies f.Timeouts to the monitor.
func (f *Formation) tuneMonitor(ctx context.Context) error {
	ms := func(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }
	t := f.Timeouts
	for _, kv := range [][2]string{
		{"health_check_period", ms(t.HealthCheckPeriod)},
		{"health_check_timeout", ms(t.HealthCheckTimeout)},
		{"health_check_max_retries", strconv.Itoa(t.HealthCheckMaxRetries)},
		{"health_check_retry_delay", ms(t.HealthCheckRetryDelay)},
		{"node_considered_unhealthy_timeout", ms(t.NodeUnhealthy)},
		{"primary_demote_timeout", ms(t.PrimaryDemote)},
	} {
		if _, err := f.mon.ExecContext(ctx, fmt.Sprintf("ALTER SYSTEM SET pgautofailover.%s = %s", kv[0], kv[1])); err != nil {
			return fmt.Errorf("ha: tuning the monitor: %w", err)
		}
	}
	_, err := f.mon.ExecContext(ctx, "SELECT pg_reload_conf()")
	return err
}

// autoctlCmd runs one pg_autoctl command to completion.
func (f *Formation) autoctlCmd(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, f.autoctl, args...)
	cmd.Dir = f.Dir
	cmd.Env = f.env
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: f.cred, Setpgid: true}
	out, err := cmd.CombinedOutput()
	return tail(string(out), 30), err
}

// startNode starts `pg_autoctl run` for n in its own process group.
func (f *Formation) startNode(n *Node) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd != nil {
		select {
		case <-n.done:
		default:
			return fmt.Errorf("ha: %s is running", n.Name)
		}
	}
	logf, err := os.OpenFile(n.log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(logf, "\n==== %s: pg_autoctl run\n", time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(f.autoctl, "run", "--pgdata", n.PGData)
	cmd.Dir = f.Dir
	cmd.Env = f.env
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: f.cred, Setpgid: true}
	// A test binary that dies takes the node down with it (pg_autoctl
	// stops its Postgres on SIGTERM).
	setPdeathsig(cmd.SysProcAttr, syscall.SIGTERM)
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("ha: starting pg_autoctl run for %s: %w", n.Name, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); logf.Close(); close(done) }()
	n.cmd, n.done = cmd, done
	return nil
}

// Stop stops every node (SIGTERM to each process group, SIGKILL after
// 20 s) and removes the directory. It may be called again.
func (f *Formation) Stop() error {
	if f.mon != nil {
		f.mon.Close()
	}
	nodes := append([]*Node(nil), f.Nodes...)
	if f.Monitor != nil {
		nodes = append(nodes, f.Monitor)
	}
	var wg sync.WaitGroup
	for _, n := range nodes {
		if n == nil {
			continue
		}
		n.mu.Lock()
		cmd, done := n.cmd, n.done
		n.mu.Unlock()
		if cmd == nil {
			continue
		}
		select {
		case <-done:
			continue // already stopped (or killed): nothing of ours to signal
		default:
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
			select {
			case <-done:
			case <-time.After(20 * time.Second):
			}
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}()
	}
	wg.Wait()
	if f.Dir == "" || os.Getenv("SYNCGUARD_HA_KEEP") != "" {
		return nil
	}
	return os.RemoveAll(f.Dir)
}

// logTails returns the end of each node's log, for error messages.
func (f *Formation) logTails(lines int) string {
	var b strings.Builder
	for _, n := range append([]*Node{f.Monitor}, f.Nodes...) {
		if n == nil {
			continue
		}
		data, err := os.ReadFile(n.log)
		if err != nil {
			continue
		}
		fmt.Fprintf(&b, "\n--- %s (tail) ---\n%s", n.log, tail(string(data), lines))
	}
	return b.String()
}

// LogTails is the end of every node's pg_autoctl log.
func (f *Formation) LogTails(lines int) string { return f.logTails(lines) }

func tail(s string, lines int) string {
	ls := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(ls) > lines {
		ls = ls[len(ls)-lines:]
	}
	return strings.Join(ls, "\n")
}

// freePorts picks n distinct free TCP ports. PostgreSQL listens on them
// moments later; a port lost in between fails Start, which the caller may
// retry.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports []int
	for len(ports) < n {
		l, err := net.Listen("tcp", ":0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
