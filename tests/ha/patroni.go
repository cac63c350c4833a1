package ha

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	libpq "github.com/lib/pq"

	"github.com/syncguard/syncguard-go/tests/pgtest/pginstall"
)

// ErrNoPatroni is wrapped by StartPatroni's error when Patroni, etcd or
// HAProxy is not installed.
var ErrNoPatroni = errors.New("ha: Patroni, etcd or HAProxy is not installed")

// PatroniSettings are the timing settings Patroni is given (its dynamic
// configuration in the DCS, see docs/ha.md).
type PatroniSettings struct {
	TTL          int // ttl: seconds the leader key lives without renewal
	LoopWait     int // loop_wait: seconds between HA loops
	RetryTimeout int // retry_timeout: seconds for DCS and PostgreSQL retries
	// PrimaryStartTimeout is primary_start_timeout: how long a crashed
	// primary may recover in place before Patroni fails over; 0 fails over
	// at once (Patroni's default is 300).
	PrimaryStartTimeout int
}

// FastPatroni are the settings the tests use: Patroni requires
// loop_wait + 2*retry_timeout <= ttl.
var FastPatroni = PatroniSettings{TTL: 10, LoopWait: 2, RetryTimeout: 4, PrimaryStartTimeout: 0}

// PatroniOptions configure StartPatroni.
type PatroniOptions struct {
	// Async: synchronous_mode off, so a commit is acknowledged before any
	// standby has it. Default: synchronous_mode and synchronous_mode_strict.
	Async    bool
	Settings PatroniSettings // zero: FastPatroni
	// Routes picks the clients' ways in: "haproxy" (HAProxy's primary
	// port), "multihost" (every member, target_session_attrs=read-write);
	// default both.
	Routes []string
	// Adapters picks "pq" and/or "pgx"; default both.
	Adapters []string
	Logf     func(format string, args ...any)
}

// proc is one process the harness started.
type proc struct {
	name string
	log  string
	args []string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// Member is one Patroni-managed PostgreSQL.
type Member struct {
	proc
	Port, APIPort int
	PGData        string
	config        string
}

// Patroni is a running Patroni cluster on this machine: one etcd, three
// PostgreSQL members each under its own Patroni, and HAProxy in front,
// run as the postgres OS user when the process is root, in a fresh
// directory under os.TempDir().
type Patroni struct {
	Dir          string
	Members      []*Member
	Etcd         *proc
	HAProxy      *proc
	HAProxyPort  int
	Settings     PatroniSettings
	Async        bool
	routes, adps []string
	fixed        []client // when set, the clients instead of routes x adps
	cred         *syscall.Credential
	logf         func(string, ...any)
}

// PatroniAvailable reports why a Patroni cluster cannot be started here
// (nil: it can).
func PatroniAvailable() error {
	_, err := patroniBinaries()
	return err
}

type patroniBins struct{ patroni, etcd, haproxy, pgBin string }

func patroniBinaries() (b patroniBins, err error) {
	for _, x := range []struct {
		dst *string
		cmd string
	}{{&b.patroni, "patroni"}, {&b.etcd, "etcd"}, {&b.haproxy, "haproxy"}} {
		p, err := exec.LookPath(x.cmd)
		if err != nil {
			for _, dir := range []string{"/usr/sbin", "/usr/bin"} {
				if _, serr := os.Stat(filepath.Join(dir, x.cmd)); serr == nil {
					p, err = filepath.Join(dir, x.cmd), nil
					break
				}
			}
		}
		if err != nil {
			return b, fmt.Errorf("%w: no %s (Debian: apt-get install patroni etcd-server haproxy)", ErrNoPatroni, x.cmd)
		}
		*x.dst = p
	}
	for _, d := range pginstall.BinDirs() {
		if _, err := os.Stat(filepath.Join(d, "pg_ctl")); err == nil {
			b.pgBin = d
			return b, nil
		}
	}
	return b, fmt.Errorf("%w: no PostgreSQL server binaries", ErrNoPatroni)
}

// StartPatroni starts etcd, three Patroni members (member1 bootstraps and
// is the first primary) and HAProxy, and waits until the cluster has a
// leader and two streaming replicas (one of them synchronous, unless
// Async). Stop it with Stop.
func StartPatroni(ctx context.Context, o PatroniOptions) (_ *Patroni, err error) {
	bins, err := patroniBinaries()
	if err != nil {
		return nil, err
	}
	p := &Patroni{Settings: o.Settings, Async: o.Async, routes: o.Routes, adps: o.Adapters, logf: o.Logf}
	if p.Settings == (PatroniSettings{}) {
		p.Settings = FastPatroni
	}
	if len(p.routes) == 0 {
		p.routes = []string{"haproxy", "multihost"}
	}
	if len(p.adps) == 0 {
		p.adps = []string{"pq", "pgx"}
	}
	if p.logf == nil {
		p.logf = func(string, ...any) {}
	}
	if p.cred, err = pginstall.Credential(); err != nil {
		return nil, fmt.Errorf("ha: %w", err)
	}
	if p.Dir, err = os.MkdirTemp("", "syncguard-patroni-*"); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			err = fmt.Errorf("%w%s", err, p.LogTails(30))
			_ = p.Stop()
		}
	}()
	if err := os.Chmod(p.Dir, 0o700); err != nil {
		return nil, err
	}
	if err := p.chown(p.Dir); err != nil {
		return nil, err
	}
	ports, err := freePorts(9)
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", ports[1])
	p.Etcd = p.newProc("etcd", bins.etcd, "--name", "sg", "--data-dir", filepath.Join(p.Dir, "etcd"),
		"--listen-client-urls", etcdURL, "--advertise-client-urls", etcdURL,
		"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", "sg="+peerURL, "--log-level", "warn")
	if err := p.start(p.Etcd); err != nil {
		return nil, err
	}
	for i := range 3 {
		m := &Member{Port: ports[2+2*i], APIPort: ports[3+2*i]}
		m.name = fmt.Sprintf("member%d", i+1)
		m.PGData = filepath.Join(p.Dir, m.name)
		m.config = filepath.Join(p.Dir, m.name+".yml")
		m.log = filepath.Join(p.Dir, m.name+".log")
		m.args = []string{bins.patroni, m.config}
		if err := p.writeConfig(m, ports[0], bins.pgBin); err != nil {
			return nil, err
		}
		p.Members = append(p.Members, m)
	}
	p.HAProxyPort = ports[8]
	hcfg := filepath.Join(p.Dir, "haproxy.cfg")
	if err := p.writeHAProxy(hcfg); err != nil {
		return nil, err
	}
	p.HAProxy = p.newProc("haproxy", bins.haproxy, "-db", "-f", hcfg)
	// member1 bootstraps alone, so that it is the first primary.
	if err := p.start(&p.Members[0].proc); err != nil {
		return nil, err
	}
	if err := p.waitFor(ctx, "member1 to lead", 2*time.Minute, func(ctx context.Context) (bool, error) {
		st, err := p.State(ctx)
		return err == nil && st.Leader == "member1", nil
	}); err != nil {
		return nil, err
	}
	for _, m := range p.Members[1:] {
		if err := p.start(&m.proc); err != nil {
			return nil, err
		}
	}
	if err := p.start(p.HAProxy); err != nil {
		return nil, err
	}
	if _, err := p.WaitStable(ctx, 3*time.Minute); err != nil {
		return nil, err
	}
	p.logf("ha: Patroni cluster up in %v (%s; etcd :%d, members :%d :%d :%d, HAProxy primary port :%d; %s)",
		time.Since(t0).Round(time.Millisecond), p.settings(), ports[0], p.Members[0].Port, p.Members[1].Port, p.Members[2].Port,
		p.HAProxyPort, p.Dir)
	return p, nil
}

func (p *Patroni) newProc(name, bin string, args ...string) *proc {
	return &proc{name: name, log: filepath.Join(p.Dir, name+".log"), args: append([]string{bin}, args...)}
}

func (p *Patroni) chown(path string) error {
	if p.cred == nil {
		return nil
	}
	return os.Chown(path, int(p.cred.Uid), int(p.cred.Gid))
}

func (p *Patroni) writeFile(path, s string) error {
	if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
		return err
	}
	return p.chown(path)
}

func (p *Patroni) writeConfig(m *Member, etcdPort int, pgBin string) error {
	sync := "true"
	if p.Async {
		sync = "false"
	}
	s := p.Settings
	return p.writeFile(m.config, fmt.Sprintf(`scope: syncguard
name: %[1]s
log:
  level: WARNING
restapi:
  listen: 127.0.0.1:%[2]d
  connect_address: 127.0.0.1:%[2]d
etcd3:
  hosts: 127.0.0.1:%[3]d
bootstrap:
  dcs:
    ttl: %[4]d
    loop_wait: %[5]d
    retry_timeout: %[6]d
    primary_start_timeout: %[7]d
    maximum_lag_on_failover: 1048576
    synchronous_mode: %[8]s
    synchronous_mode_strict: %[8]s
    postgresql:
      use_pg_rewind: true
      use_slots: true
      parameters:
        fsync: "off"
        max_connections: 100
        shared_buffers: 32MB
        wal_keep_size: 256MB
  initdb:
    - encoding: UTF8
    - auth: trust
postgresql:
  listen: 127.0.0.1:%[9]d
  connect_address: 127.0.0.1:%[9]d
  data_dir: %[10]s
  bin_dir: %[11]s
  pgpass: %[12]s
  authentication:
    superuser:
      username: postgres
    replication:
      username: postgres
    rewind:
      username: postgres
  parameters:
    unix_socket_directories: %[13]s
  pg_hba:
    - local all all trust
    - host all all 127.0.0.1/32 trust
    - host replication all 127.0.0.1/32 trust
tags:
  nofailover: false
  noloadbalance: false
  clonefrom: false
`, m.name, m.APIPort, etcdPort, s.TTL, s.LoopWait, s.RetryTimeout, s.PrimaryStartTimeout, sync,
		m.Port, m.PGData, pgBin, filepath.Join(p.Dir, m.name+".pgpass"), p.Dir))
}

// writeHAProxy writes the configuration Patroni's documentation shows: the
// primary port routes to the member whose REST API answers /primary with
// 200, and cuts the sessions of a member marked down.
func (p *Patroni) writeHAProxy(path string) error {
	var servers strings.Builder
	for _, m := range p.Members {
		fmt.Fprintf(&servers, "    server %s 127.0.0.1:%d maxconn 100 check port %d\n", m.name, m.Port, m.APIPort)
	}
	return p.writeFile(path, fmt.Sprintf(`global
    maxconn 200
defaults
    mode tcp
    retries 2
    timeout client 30m
    timeout connect 2s
    timeout server 30m
    timeout check 1s
listen primary
    bind 127.0.0.1:%d
    option httpchk OPTIONS /primary
    http-check expect status 200
    default-server inter 1s fall 2 rise 1 on-marked-down shutdown-sessions
%s`, p.HAProxyPort, servers.String()))
}

// start starts a process in its own process group, as the postgres user.
func (p *Patroni) start(x *proc) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.cmd != nil {
		select {
		case <-x.done:
		default:
			return fmt.Errorf("ha: %s is running", x.name)
		}
	}
	logf, err := os.OpenFile(x.log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(logf, "\n==== %s: %s\n", time.Now().Format(time.RFC3339Nano), strings.Join(x.args, " "))
	cmd := exec.Command(x.args[0], x.args[1:]...)
	cmd.Dir = p.Dir
	cmd.Env = []string{"PATH=/usr/bin:/bin:/usr/sbin", "HOME=" + p.Dir, "LANG=C.UTF-8", "ETCD_UNSUPPORTED_ARCH=" + os.Getenv("ETCD_UNSUPPORTED_ARCH")}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: p.cred, Setpgid: true}
	// A test binary that dies takes the process down with it (Patroni
	// stops its PostgreSQL on SIGTERM).
	setPdeathsig(cmd.SysProcAttr, syscall.SIGTERM)
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("ha: starting %s: %w", x.name, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); logf.Close(); close(done) }()
	x.cmd, x.done = cmd, done
	return nil
}

// Running reports whether x is running.
func (x *proc) Running() bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.cmd == nil {
		return false
	}
	select {
	case <-x.done:
		return false
	default:
		return true
	}
}

// stop sends sig to x's process group (SIGCONT too, should it be stopped),
// SIGKILL after grace, and waits for x to exit.
func (x *proc) stop(sig syscall.Signal, grace time.Duration) {
	x.mu.Lock()
	cmd, done := x.cmd, x.done
	x.mu.Unlock()
	if cmd == nil {
		return
	}
	select {
	case <-done:
		return
	default:
	}
	_ = syscall.Kill(-cmd.Process.Pid, sig)
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGCONT)
	select {
	case <-done:
	case <-time.After(grace):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
}

// Stop stops HAProxy, the members (Patroni stops its PostgreSQL on
// SIGTERM; a postmaster left behind is killed) and etcd, and removes the
// directory. It may be called again.
func (p *Patroni) Stop() error {
	if p.HAProxy != nil {
		p.HAProxy.stop(syscall.SIGTERM, 5*time.Second)
	}
	var wg sync.WaitGroup
	for _, m := range p.Members {
		wg.Go(func() {
			m.stop(syscall.SIGTERM, 30*time.Second)
			m.killPostmaster()
		})
	}
	wg.Wait()
	if p.Etcd != nil {
		p.Etcd.stop(syscall.SIGTERM, 10*time.Second)
	}
	if p.Dir == "" || os.Getenv("SYNCGUARD_HA_KEEP") != "" {
		return nil
	}
	return os.RemoveAll(p.Dir)
}

// killPostmaster kills a postmaster that outlived its Patroni (Patroni
// starts PostgreSQL detached from its own process group) and waits for
// its data directory to be free.
func (m *Member) killPostmaster() {
	for range 200 {
		pid, err := m.PostmasterPID()
		if err != nil || syscall.Kill(pid, 0) != nil {
			return
		}
		_ = syscall.Kill(pid, syscall.SIGCONT)
		_ = syscall.Kill(pid, syscall.SIGKILL)
		time.Sleep(50 * time.Millisecond)
	}
}

// PostmasterPID reads m's postmaster.pid.
func (m *Member) PostmasterPID() (int, error) {
	n := Node{Name: m.name, PGData: m.PGData}
	return n.PostmasterPID()
}

// Name is the member's Patroni name.
func (m *Member) Name() string { return m.name }

// LogTails is the end of every process's log.
func (p *Patroni) LogTails(lines int) string {
	var b strings.Builder
	files, _ := filepath.Glob(filepath.Join(p.Dir, "*.log"))
	pglogs, _ := filepath.Glob(filepath.Join(p.Dir, "member*", "log", "*"))
	for _, f := range append(files, pglogs...) {
		data, err := os.ReadFile(f)
		if err != nil || len(data) == 0 {
			continue
		}
		fmt.Fprintf(&b, "\n--- %s (tail) ---\n%s", f, tail(string(data), lines))
	}
	return b.String()
}

func (p *Patroni) member(name string) *Member {
	for _, m := range p.Members {
		if m.name == name {
			return m
		}
	}
	return nil
}

// MultiHostDSN names every member with target_session_attrs=read-write.
func (p *Patroni) MultiHostDSN(app string) string {
	var hosts, ports []string
	for _, m := range p.Members {
		hosts = append(hosts, "127.0.0.1")
		ports = append(ports, fmt.Sprint(m.Port))
	}
	return fmt.Sprintf("host=%s port=%s user=postgres dbname=postgres sslmode=disable target_session_attrs=read-write connect_timeout=2 application_name=%s",
		strings.Join(hosts, ","), strings.Join(ports, ","), app)
}

// HAProxyDSN goes through HAProxy's primary port.
func (p *Patroni) HAProxyDSN(app string) string {
	return fmt.Sprintf("host=127.0.0.1 port=%d user=postgres dbname=postgres sslmode=disable connect_timeout=2 application_name=%s", p.HAProxyPort, app)
}

// MemberDSN reaches one member only.
func (p *Patroni) MemberDSN(m *Member, app string) string {
	return fmt.Sprintf("host=127.0.0.1 port=%d user=postgres dbname=postgres sslmode=disable connect_timeout=2 application_name=%s", m.Port, app)
}

// OpenPool opens a pool with the adapter's driver ("pq" or "pgx") on dsn.
func OpenPool(adapterName, dsn string) (*sql.DB, error) {
	switch adapterName {
	case "pq":
		c, err := libpq.NewConnector(dsn)
		if err != nil {
			return nil, err
		}
		return sql.OpenDB(c), nil
	case "pgx":
		return sql.Open("pgx", dsn)
	}
	return nil, fmt.Errorf("ha: unknown adapter %q", adapterName)
}

func (p *Patroni) clients() []client {
	if p.fixed != nil {
		return p.fixed
	}
	var cs []client
	for _, route := range p.routes {
		for _, a := range p.adps {
			cs = append(cs, p.client(a, route))
		}
	}
	return cs
}

// client is adapter a ("pq", "pgx") through route ("haproxy",
// "multihost").
func (p *Patroni) client(a, route string) client {
	dsn := p.HAProxyDSN
	if route == "multihost" {
		dsn = p.MultiHostDSN
	}
	return client{a + "-" + route, func(app string) (*sql.DB, error) { return OpenPool(a, dsn(app)) }}
}

func (p *Patroni) async() bool { return p.Async }

func (p *Patroni) settings() string {
	s := p.Settings
	mode := "synchronous_mode: true, synchronous_mode_strict: true"
	if p.Async {
		mode = "synchronous_mode: false"
	}
	return fmt.Sprintf("Patroni ttl: %d, loop_wait: %d, retry_timeout: %d, primary_start_timeout: %d, %s; HAProxy check inter 1s fall 2 rise 1",
		s.TTL, s.LoopWait, s.RetryTimeout, s.PrimaryStartTimeout, mode)
}
