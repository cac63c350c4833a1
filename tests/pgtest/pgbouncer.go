package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/syncguard/syncguard-go/tests/pgtest/pginstall"
)

// PgBouncer is a PgBouncer process started by [Server.StartPgBouncer] in
// front of a throwaway server. It runs in the foreground as a child of the
// test process (as the `postgres` OS user when the test runs as root), with
// its configuration, auth files, log and pid file in a fresh temp directory,
// and listens on a free TCP port of 127.0.0.1 (no unix socket). The
// distribution's service (systemd/init) is never used.
//
// Authentication mirrors the server (auth_type = hba): the superuser
// `postgres` is trusted from 127.0.0.1; every other role, such as
// Server.PasswordRole, logs in with scram-sha-256 against the auth file,
// and PgBouncer uses the same password to log in to the server.
type PgBouncer struct {
	// DSN connects as the superuser postgres through PgBouncer, in URL form:
	// postgres://postgres@127.0.0.1:PORT/postgres?sslmode=disable.
	DSN  string
	Host string
	Port int
	// Version is PgBouncer's version, such as "1.18.0".
	Version string
	// PoolMode is the pool_mode it runs with.
	PoolMode string

	serverDir
	dsn     dsnParts
	logFile string
	bin     string

	mu       sync.Mutex
	cmd      *exec.Cmd
	exited   chan struct{}
	stopOnce sync.Once
	stopErr  error
}

// PgBouncerOptions configures StartPgBouncer. The zero value is a
// transaction-mode pooler with 20 server connections per database and user.
type PgBouncerOptions struct {
	// PoolMode is "transaction" (default), "session" or "statement".
	PoolMode string
	// DefaultPoolSize is default_pool_size: server connections per
	// database/user pair. 0 means 20.
	DefaultPoolSize int
	// MaxClientConn is max_client_conn. 0 means 1000.
	MaxClientConn int
	// ServerLoginRetry is server_login_retry, how long PgBouncer waits after
	// a failed server login before trying again. 0 means 1 s (PgBouncer's
	// own default, 15 s, would keep clients waiting that long after a
	// server restart).
	ServerLoginRetry time.Duration
	// MaxPreparedStatements writes max_prepared_statements (PgBouncer 1.21
	// and later: protocol-level prepared statements in transaction mode).
	// 0 leaves it out; StartPgBouncer fails when it is set and the
	// installed PgBouncer is older than 1.21.
	MaxPreparedStatements int
	// Extra lines appended to the [pgbouncer] section.
	Extra string
}

// ErrNoPgBouncer is returned (wrapped) by StartPgBouncer when no pgbouncer
// binary is installed.
var ErrNoPgBouncer = errors.New("pgtest: pgbouncer is not installed")

// PgBouncerBinary finds the pgbouncer executable: $SYNCGUARD_PGBOUNCER,
// then PATH, then /usr/sbin/pgbouncer and /usr/local/bin/pgbouncer (the
// Debian package installs it in /usr/sbin, which is not on every PATH).
func PgBouncerBinary() (string, error) {
	if p := os.Getenv("SYNCGUARD_PGBOUNCER"); p != "" {
		if pginstall.IsExecutable(p) {
			return p, nil
		}
		return "", fmt.Errorf("%w: SYNCGUARD_PGBOUNCER=%s is not executable", ErrNoPgBouncer, p)
	}
	if p, err := exec.LookPath("pgbouncer"); err == nil {
		return p, nil
	}
	for _, p := range []string{"/usr/sbin/pgbouncer", "/usr/local/bin/pgbouncer", "/usr/local/sbin/pgbouncer"} {
		if pginstall.IsExecutable(p) {
			return p, nil
		}
	}
	return "", fmt.Errorf("%w (apt-get install pgbouncer, or set SYNCGUARD_PGBOUNCER)", ErrNoPgBouncer)
}

var versionRE = regexp.MustCompile(`(?i)pgbouncer\s+(\d+\.\d+(?:\.\d+)?)`)

// PgBouncerVersion runs `pgbouncer --version` and returns the version
// number, such as "1.18.0".
func PgBouncerVersion() (string, error) {
	bin, err := PgBouncerBinary()
	if err != nil {
		return "", err
	}
	out, err := exec.Command(bin, "--version").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("pgbouncer --version: %w: %s", err, out)
	}
	m := versionRE.FindSubmatch(out)
	if m == nil {
		return "", fmt.Errorf("pgbouncer --version: no version in %q", out)
	}
	return string(m[1]), nil
}

// versionAtLeast reports whether dotted version v >= major.minor.
func versionAtLeast(v string, major, minor int) bool {
	parts := strings.Split(v, ".")
	maj, _ := strconv.Atoi(parts[0])
	mnr := 0
	if len(parts) > 1 {
		mnr, _ = strconv.Atoi(parts[1])
	}
	return maj > major || maj == major && mnr >= minor
}

// RequirePgBouncer starts a PgBouncer (opts) in front of s for the test
// and stops it at cleanup. It skips the test when pgbouncer is not
// installed, and fails it instead in a CI job (InCI).
func RequirePgBouncer(t testing.TB, s *Server, opts PgBouncerOptions) *PgBouncer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := s.StartPgBouncer(ctx, opts)
	if err != nil {
		if _, ci := InCI(); errors.Is(err, ErrNoPgBouncer) && !ci {
			t.Skip(err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.Stop(); err != nil {
			t.Errorf("stopping pgbouncer: %v", err)
		}
	})
	return b
}

// StartPgBouncer starts a PgBouncer in front of s (local or docker kind)
// and returns once it accepts connections. The caller must call Stop.
func (s *Server) StartPgBouncer(ctx context.Context, opts PgBouncerOptions) (_ *PgBouncer, err error) {
	if s == nil || s.Kind == KindEnv {
		return nil, errors.New("pgtest: StartPgBouncer needs a local or docker server (the env kind's credentials are unknown)")
	}
	bin, err := PgBouncerBinary()
	if err != nil {
		return nil, err
	}
	version, err := PgBouncerVersion()
	if err != nil {
		return nil, err
	}
	if opts.MaxPreparedStatements > 0 && !versionAtLeast(version, 1, 21) {
		return nil, fmt.Errorf("pgtest: max_prepared_statements needs PgBouncer 1.21 or later; %s is %s", bin, version)
	}
	if opts.PoolMode == "" {
		opts.PoolMode = "transaction"
	}
	if opts.DefaultPoolSize <= 0 {
		opts.DefaultPoolSize = 20
	}
	if opts.MaxClientConn <= 0 {
		opts.MaxClientConn = 1000
	}
	if opts.ServerLoginRetry <= 0 {
		opts.ServerLoginRetry = time.Second
	}

	sd, err := newServerDir("syncguard-pgbouncer-*") // PgBouncer refuses to run as root
	if err != nil {
		return nil, err
	}
	b := &PgBouncer{bin: bin, Version: version, PoolMode: opts.PoolMode, Host: "127.0.0.1", serverDir: sd}
	defer func() {
		if err != nil {
			_ = b.Stop()
		}
	}()
	b.logFile = filepath.Join(b.dir, "pgbouncer.log")
	hba := "# written by pgtest\nhost all postgres 127.0.0.1/32 trust\nhost all all 127.0.0.1/32 scram-sha-256\n"
	// Trusted users must be listed too (PgBouncer knows no user outside
	// the auth file); postgres has no password, the server trusts it.
	users := fmt.Sprintf("\"postgres\" \"\"\n%q %q\n", passwordRole, password)
	for name, content := range map[string]string{"hba.conf": hba, "userlist.txt": users} {
		if err := b.writeFile(filepath.Join(b.dir, name), content); err != nil {
			return nil, err
		}
	}

	for attempt := 0; ; attempt++ {
		if b.Port, err = pickPort(); err != nil {
			return nil, err
		}
		if err := b.writeFile(filepath.Join(b.dir, "pgbouncer.ini"), b.config(s, opts)); err != nil {
			return nil, err
		}
		_ = os.Remove(b.logFile)
		startErr := b.start()
		if startErr == nil {
			startErr = b.waitReady(ctx, 30*time.Second)
		}
		if startErr == nil {
			break
		}
		log := b.LogTail(40)
		b.kill()
		if attempt < portRetries && ctx.Err() == nil && strings.Contains(log, "Address already in use") {
			continue
		}
		return nil, fmt.Errorf("pgtest: starting pgbouncer (port %d): %w\n--- %s (tail) ---\n%s", b.Port, startErr, b.logFile, log)
	}
	b.DSN = fmt.Sprintf("postgres://postgres@%s/postgres?sslmode=disable", net.JoinHostPort(b.Host, strconv.Itoa(b.Port)))
	if b.dsn, err = parseDSN(b.DSN); err != nil {
		return nil, err
	}
	return b, nil
}

func (b *PgBouncer) config(s *Server, opts PgBouncerOptions) string {
	var c strings.Builder
	fmt.Fprintf(&c, `;; written by pgtest
[databases]
* = host=%s port=%d

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = hba
auth_hba_file = %[4]s/hba.conf
auth_file = %[4]s/userlist.txt
admin_users = postgres
stats_users = postgres
pool_mode = %[5]s
default_pool_size = %[6]d
max_client_conn = %[7]d
server_login_retry = %[8]d
;; lib/pq and psql may send it; PgBouncer rejects unknown startup parameters
ignore_startup_parameters = extra_float_digits
logfile = %[4]s/pgbouncer.log
pidfile = %[4]s/pgbouncer.pid
log_connections = 0
log_disconnections = 0
`, s.Host, s.Port, b.Port, b.dir, opts.PoolMode, opts.DefaultPoolSize, opts.MaxClientConn,
		max(1, int(opts.ServerLoginRetry.Round(time.Second)/time.Second)))
	if opts.MaxPreparedStatements > 0 {
		fmt.Fprintf(&c, "max_prepared_statements = %d\n", opts.MaxPreparedStatements)
	}
	if opts.Extra != "" {
		c.WriteString(opts.Extra)
		c.WriteString("\n")
	}
	return c.String()
}

// start runs pgbouncer in the foreground. The process is started from a
// goroutine locked to its OS thread that lives until the process exits, so
// that Pdeathsig (sent when that thread dies) only fires when the test
// process itself dies: no pgbouncer outlives a crashed test.
func (b *PgBouncer) start() error {
	started := make(chan error, 1)
	exited := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		defer close(exited)
		cmd := exec.Command(b.bin, filepath.Join(b.dir, "pgbouncer.ini"))
		cmd.Dir = b.dir
		cmd.Env = cleanEnv("HOME=" + b.dir)
		cmd.SysProcAttr = b.procAttr()
		setPdeathsig(cmd.SysProcAttr)
		out, err := os.OpenFile(filepath.Join(b.dir, "pgbouncer.stderr"), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
		if err != nil {
			started <- err
			return
		}
		defer out.Close()
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		b.mu.Lock()
		b.cmd, b.exited = cmd, exited
		b.mu.Unlock()
		started <- nil
		_ = cmd.Wait()
	}()
	return <-started
}

// waitReady waits until PgBouncer answers a query on its admin console, or
// the process exits.
func (b *PgBouncer) waitReady(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	b.mu.Lock()
	exited := b.exited
	b.mu.Unlock()
	var last error
	for {
		if _, last = b.Admin(ctx, "SHOW VERSION"); last == nil {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("pgbouncer exited: %s", b.stderrTail())
		case <-ctx.Done():
			return fmt.Errorf("pgbouncer not ready after %v: %v", timeout, last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Admin runs a command on PgBouncer's admin console (database "pgbouncer",
// as postgres) through psql, such as "SHOW POOLS" or "RECONNECT", and
// returns psql's unaligned, tuples-only output.
func (b *PgBouncer) Admin(ctx context.Context, command string) (string, error) {
	dsn := fmt.Sprintf("postgres://postgres@%s/pgbouncer?sslmode=disable", net.JoinHostPort(b.Host, strconv.Itoa(b.Port)))
	return runPsql(ctx, dsn, command)
}

// DSNFor is Server.DSNFor for PgBouncer's address.
func (b *PgBouncer) DSNFor(user, password, dbname string) string {
	return b.dsn.with(user, password, dbname)
}

// LogTail returns the last n lines of PgBouncer's log.
func (b *PgBouncer) LogTail(n int) string {
	data, err := os.ReadFile(b.logFile)
	if err != nil {
		return fmt.Sprintf("(no log: %v) %s", err, b.stderrTail())
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func (b *PgBouncer) stderrTail() string {
	data, _ := os.ReadFile(filepath.Join(b.dir, "pgbouncer.stderr"))
	return strings.TrimSpace(string(data))
}

// Stop shuts PgBouncer down (SIGTERM, then SIGKILL after 10 s) and removes
// its directory. Safe to call more than once.
func (b *PgBouncer) Stop() error {
	if b == nil {
		return nil
	}
	b.stopOnce.Do(func() {
		b.kill()
		if b.dir != "" {
			b.stopErr = os.RemoveAll(b.dir)
		}
	})
	return b.stopErr
}

func (b *PgBouncer) kill() {
	b.mu.Lock()
	cmd, exited := b.cmd, b.exited
	b.cmd = nil
	b.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
	}
}
