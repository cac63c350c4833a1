package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/syncguard/syncguard-go/internal/rules"
	"github.com/syncguard/syncguard-go/tests/pgtest/pginstall"
)

// Options configures the throwaway server (local and docker kinds). They do
// not apply to a server given by SYNCGUARD_TEST_DSN.
type Options struct {
	// Fsync keeps fsync=on in the throwaway cluster (benchmarks want it).
	// Default false: fsync=off and full_page_writes=off for fast tests
	// (synchronous_commit stays on so an immediate-mode restart keeps
	// acknowledged commits).
	Fsync bool
	// MaxConnections for the throwaway cluster; 0 means 200.
	MaxConnections int
}

// maxPrepared is max_prepared_transactions of local and docker servers:
// nonzero, as on servers used with XA, so that tests can prepare
// transactions (an attacker's prepared transaction holding a key's
// advisory lock: tests/itest TestAdversary).
const maxPrepared = 8

func (o Options) maxConnections() int {
	if o.MaxConnections <= 0 {
		return 200
	}
	return o.MaxConnections
}

// Server kinds, the values of Server.Kind.
const (
	KindEnv    = "env"    // SYNCGUARD_TEST_DSN
	KindLocal  = "local"  // throwaway cluster from installed binaries
	KindDocker = "docker" // postgres:15 container through dockertest
)

// EnvDSN names the environment variable whose DSN, when set, is used as is.
const EnvDSN = "SYNCGUARD_TEST_DSN"

// Fixed credentials of the password-auth role of local and docker servers.
const (
	passwordRole = "syncguard_pw"
	password     = "sg-secret-pw"
)

// ErrNoDatabase is returned (wrapped, with the reason each way failed) by
// Start when no PostgreSQL server could be found or started.
var ErrNoDatabase = errors.New("pgtest: no PostgreSQL server available")

// Server is a PostgreSQL server for tests.
type Server struct {
	// DSN connects as a superuser. For local and docker kinds it is in URL
	// form: postgres://postgres@127.0.0.1:PORT/postgres?sslmode=disable.
	// For the env kind it is SYNCGUARD_TEST_DSN as is.
	DSN  string
	Host string
	Port int
	// Kind is "env", "local" or "docker".
	Kind string
	// PasswordRole and Password name a role that logs in with
	// scram-sha-256 password authentication over TCP (local and docker
	// kinds; empty for the env kind).
	PasswordRole, Password string

	dsn    dsnParts
	local  *localCluster
	docker *dockerContainer

	stopOnce sync.Once
	stopErr  error
	mu       sync.Mutex // serializes Restart
}

// Start finds a PostgreSQL server in this order: env SYNCGUARD_TEST_DSN
// (used as is); else a throwaway cluster from installed binaries; else a
// postgres:15 container through dockertest when a Docker engine answers;
// else it returns an error wrapping ErrNoDatabase and the reason each way
// failed. See the package documentation for details.
//
// The caller must call Stop when done.
func Start(ctx context.Context, opts Options) (*Server, error) {
	if dsn := os.Getenv(EnvDSN); dsn != "" {
		return newEnvServer(dsn)
	}
	s, localErr := startLocal(ctx, opts)
	if localErr == nil {
		return s, nil
	}
	if ctx.Err() != nil {
		return nil, fmt.Errorf("%w: env: %s not set; local: %w", ErrNoDatabase, EnvDSN, localErr)
	}
	s, dockerErr := startDocker(ctx, opts)
	if dockerErr == nil {
		return s, nil
	}
	return nil, fmt.Errorf("%w: env: %s not set; local: %w; docker: %w", ErrNoDatabase, EnvDSN, localErr, dockerErr)
}

func newEnvServer(dsn string) (*Server, error) {
	p, err := parseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("pgtest: %s: %w", EnvDSN, err)
	}
	host, port := p.hostPort()
	return &Server{DSN: dsn, Host: host, Port: port, Kind: KindEnv, dsn: p}, nil
}

// newServer fills the public fields of a local or docker server.
func newServer(kind, host string, port int) *Server {
	dsn := fmt.Sprintf("postgres://postgres@%s/postgres?sslmode=disable", net.JoinHostPort(host, fmt.Sprint(port)))
	p, err := parseDSN(dsn)
	if err != nil {
		panic(err) // cannot happen: the URL is built above
	}
	return &Server{DSN: dsn, Host: host, Port: port, Kind: kind, dsn: p}
}

// setupRoles creates the password-auth role, tolerating one left by an
// earlier run (docker) or a retry.
func (s *Server) setupRoles(ctx context.Context) error {
	sql := fmt.Sprintf(`SET password_encryption = 'scram-sha-256';
DO $$ BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '%[1]s') THEN
    CREATE ROLE %[1]s LOGIN;
  END IF;
END $$;
ALTER ROLE %[1]s LOGIN PASSWORD '%[2]s';`, passwordRole, password)
	if _, err := runPsql(ctx, s.DSN, sql); err != nil {
		return fmt.Errorf("creating role %s: %w", passwordRole, err)
	}
	s.PasswordRole, s.Password = passwordRole, password
	return nil
}

// Stop stops and deletes the throwaway cluster or container. It is a no-op
// for the env kind and safe to call more than once.
func (s *Server) Stop() error {
	if s == nil {
		return nil
	}
	s.stopOnce.Do(func() {
		switch {
		case s.local != nil:
			s.stopErr = s.local.destroy()
		case s.docker != nil:
			s.stopErr = s.docker.destroy()
		}
	})
	return s.stopErr
}

// CanRestart reports whether Restart is supported (the local kind).
func (s *Server) CanRestart() bool { return s != nil && s.local != nil }

// Restart does a crash-like restart (pg_ctl restart -m immediate: no
// shutdown checkpoint, crash recovery on start) and waits until the server
// accepts connections again. Existing connections are broken. It returns an
// error when !CanRestart().
func (s *Server) Restart(ctx context.Context) error {
	if !s.CanRestart() {
		return fmt.Errorf("pgtest: Restart is not supported for a %q server", s.Kind)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.local.restart(ctx)
}

// DSNFor returns a DSN for the same host and port with other credentials
// or database. An empty user keeps the DSN's user and password; a non-empty
// user replaces both (an empty password then means none). An empty dbname
// keeps the DSN's database.
func (s *Server) DSNFor(user, password, dbname string) string {
	return s.dsn.with(user, password, dbname)
}

// RefusedDSN returns a DSN to 127.0.0.1 on a port where nothing listens
// (a port just bound and closed), for testing connection-refused paths.
func (s *Server) RefusedDSN() string {
	port, err := freePort()
	if err != nil {
		port = 1 // tcpmux: nothing listens there on a test machine
	}
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable&connect_timeout=5", port)
}

// CreateDatabase creates database name (via psql as the DSN's user) unless
// it already exists, and returns s.DSNFor("", "", name).
func (s *Server) CreateDatabase(ctx context.Context, name string) (string, error) {
	if name == "" {
		return "", errors.New("pgtest: CreateDatabase: empty name")
	}
	sql := "CREATE DATABASE " + rules.QuoteIdent(name)
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		_, err = runPsql(ctx, s.DSN, sql)
		if err == nil || isAlreadyExists(err) {
			return s.DSNFor("", "", name), nil
		}
		// A concurrent session on the template database makes CREATE
		// DATABASE fail; it is transient.
		if !strings.Contains(err.Error(), "being accessed by other users") {
			break
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return "", fmt.Errorf("pgtest: CreateDatabase %q: %w", name, err)
}

func isAlreadyExists(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "already exists") ||
		strings.Contains(msg, "pg_database_datname_index") // lost a race with a concurrent CREATE
}

// freePort returns a TCP port of 127.0.0.1 that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	return port, l.Close()
}

// cleanEnv is the environment without libpq's PG* variables, so that a
// developer's PGHOST, PGPASSWORD, PGDATA etc. never steer the subprocesses.
func cleanEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PG") {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

// psqlPath finds the psql client.
func psqlPath() (string, error) {
	if p, err := exec.LookPath("psql"); err == nil {
		return p, nil
	}
	if dir, err := findBinDir(); err == nil {
		if p := dir + "/psql"; pginstall.IsExecutable(p) {
			return p, nil
		}
	}
	return "", errors.New("psql not found on PATH nor next to the server binaries")
}

// runPsql runs sql through psql against dsn, stopping at the first error,
// and returns its unaligned, tuples-only output. extraEnv (e.g.
// "PGPASSWORD=...") is added to a PG*-free environment.
func runPsql(ctx context.Context, dsn, sql string, extraEnv ...string) (string, error) {
	psql, err := psqlPath()
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, psql, "-X", "-q", "-A", "-t", "-w", "-v", "ON_ERROR_STOP=1", "-d", dsn, "-c", sql)
	cmd.Env = cleanEnv(append([]string{"PGCONNECT_TIMEOUT=10"}, extraEnv...)...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("psql: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// waitReady waits until host:port accepts PostgreSQL connections, using
// pg_isready when installed and a TCP dial otherwise.
func waitReady(ctx context.Context, host string, port int, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	isready := ""
	if dir, err := findBinDir(); err == nil && pginstall.IsExecutable(dir+"/pg_isready") {
		isready = dir + "/pg_isready"
	} else if p, err := exec.LookPath("pg_isready"); err == nil {
		isready = p
	}
	var last error
	for {
		if isready != "" {
			cmd := exec.CommandContext(ctx, isready, "-q", "-h", host, "-p", fmt.Sprint(port), "-U", "postgres", "-d", "postgres", "-t", "2")
			cmd.Env = cleanEnv()
			if last = cmd.Run(); last == nil {
				return nil
			}
		} else {
			var d net.Dialer
			c, err := d.DialContext(ctx, "tcp", net.JoinHostPort(host, fmt.Sprint(port)))
			if err == nil {
				c.Close()
				return nil
			}
			last = err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("server at %s:%d not ready after %v: %v", host, port, timeout, last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
