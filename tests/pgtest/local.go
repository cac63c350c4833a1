package pgtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/syncguard/syncguard-go/tests/pgtest/pginstall"
)

// localCluster is a throwaway cluster in a temp directory:
//
//	dir/            0755, owned by the server's OS user; unix sockets live here
//	dir/data/       the cluster (initdb)
//	dir/postgres.log
type localCluster struct {
	serverDir
	binDir  string
	dataDir string
	logFile string
	port    int
}

// portRetries is how many times a start that lost its port to another
// process is retried with a new port.
const portRetries = 3

// pickPort chooses the port of each start attempt (a variable for tests).
var pickPort = freePort

func startLocal(ctx context.Context, opts Options) (_ *Server, err error) {
	binDir, err := findBinDir()
	if err != nil {
		return nil, err
	}
	if _, err := psqlPath(); err != nil {
		return nil, err
	}
	sd, err := newServerDir("syncguard-pgtest-*")
	if err != nil {
		return nil, err
	}
	c := &localCluster{binDir: binDir, serverDir: sd}
	defer func() {
		if err != nil {
			_ = c.destroy()
		}
	}()
	c.dataDir = filepath.Join(c.dir, "data")
	c.logFile = filepath.Join(c.dir, "postgres.log")

	if out, err := c.run(ctx, "initdb", "-D", c.dataDir, "-U", "postgres", "-A", "trust",
		"-E", "UTF8", "--locale=C", "--no-sync"); err != nil {
		return nil, fmt.Errorf("initdb: %w\n%s", err, out)
	}
	hba := `# written by pgtest
local all all                trust
host  all postgres 127.0.0.1/32 trust
host  all all      127.0.0.1/32 scram-sha-256
host  all all      ::1/128      scram-sha-256
`
	if err := c.writeFile(filepath.Join(c.dataDir, "pg_hba.conf"), hba); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(c.dataDir, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return nil, err
	}
	_, err = f.WriteString("\ninclude 'pgtest.conf'\n")
	if err := errors.Join(err, f.Close()); err != nil {
		return nil, err
	}

	// Settings go to a config file rather than -c flags so that pg_ctl
	// restart (and anyone starting the cluster by hand) gets them too.
	for attempt := 0; ; attempt++ {
		c.port, err = pickPort()
		if err != nil {
			return nil, err
		}
		if err := c.writeFile(filepath.Join(c.dataDir, "pgtest.conf"), c.config(opts)); err != nil {
			return nil, err
		}
		_ = os.Remove(c.logFile)
		out, startErr := c.run(ctx, "pg_ctl", "start", "-w", "-t", "60", "-D", c.dataDir, "-l", c.logFile)
		if startErr == nil {
			break
		}
		log := c.logTail(40)
		if attempt < portRetries && ctx.Err() == nil && portTaken(log) {
			continue
		}
		return nil, fmt.Errorf("pg_ctl start (port %d): %w\n%s\n--- %s (tail) ---\n%s", c.port, startErr, out, c.logFile, log)
	}
	if err := waitReady(ctx, "127.0.0.1", c.port, 60*time.Second); err != nil {
		return nil, fmt.Errorf("%w\n--- %s (tail) ---\n%s", err, c.logFile, c.logTail(40))
	}

	s := newServer(KindLocal, "127.0.0.1", c.port)
	s.local = c
	if err := s.setupRoles(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

func (c *localCluster) config(opts Options) string {
	fsync, fpw := "off", "off"
	if opts.Fsync {
		fsync, fpw = "on", "on"
	}
	return fmt.Sprintf(`# written by pgtest
listen_addresses = '127.0.0.1'
port = %d
unix_socket_directories = '%s'
max_connections = %d
fsync = %s
full_page_writes = %s
synchronous_commit = on
log_min_messages = warning
shared_buffers = 128MB
password_encryption = 'scram-sha-256'
max_prepared_transactions = %d
`, c.port, strings.ReplaceAll(c.dir, "'", "''"), opts.maxConnections(), fsync, fpw, maxPrepared)
}

func portTaken(log string) bool {
	return strings.Contains(log, "Address already in use") ||
		strings.Contains(log, "could not create any TCP/IP sockets")
}

func (c *localCluster) restart(ctx context.Context) error {
	out, err := c.run(ctx, "pg_ctl", "restart", "-m", "immediate", "-w", "-t", "60", "-D", c.dataDir, "-l", c.logFile)
	if err != nil {
		return fmt.Errorf("pgtest: pg_ctl restart: %w\n%s\n--- %s (tail) ---\n%s", err, out, c.logFile, c.logTail(40))
	}
	if err := waitReady(ctx, "127.0.0.1", c.port, 60*time.Second); err != nil {
		return fmt.Errorf("pgtest: after restart: %w", err)
	}
	return nil
}

// destroy stops the server (fast, then immediate, then SIGKILL) and removes
// the directory.
func (c *localCluster) destroy() error {
	var errs []error
	if _, err := os.Stat(filepath.Join(c.dataDir, "postmaster.pid")); err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		if out, err := c.run(ctx, "pg_ctl", "stop", "-m", "fast", "-w", "-t", "30", "-D", c.dataDir); err != nil {
			errs = append(errs, fmt.Errorf("pg_ctl stop -m fast: %w: %s", err, out))
			if out, err := c.run(ctx, "pg_ctl", "stop", "-m", "immediate", "-w", "-t", "30", "-D", c.dataDir); err != nil {
				errs = append(errs, fmt.Errorf("pg_ctl stop -m immediate: %w: %s", err, out))
				c.killPostmaster()
			}
		}
	}
	if c.dir != "" {
		if err := os.RemoveAll(c.dir); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("pgtest: stopping cluster in %s: %w", c.dir, err)
	}
	return nil
}

// killPostmaster SIGKILLs the postmaster named in postmaster.pid, the last
// resort when pg_ctl cannot stop it.
func (c *localCluster) killPostmaster() {
	b, err := os.ReadFile(filepath.Join(c.dataDir, "postmaster.pid"))
	if err != nil {
		return
	}
	line, _, _ := strings.Cut(string(b), "\n")
	if pid, err := strconv.Atoi(strings.TrimSpace(line)); err == nil && pid > 0 {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		time.Sleep(500 * time.Millisecond) // let the backends notice and exit
	}
}

// run runs a server binary as the cluster's OS user, in the cluster
// directory, and returns its combined output.
func (c *localCluster) run(ctx context.Context, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(c.binDir, name), args...)
	cmd.Dir = c.dir
	cmd.Env = cleanEnv("HOME="+c.dir, "LC_ALL=C")
	cmd.SysProcAttr = c.procAttr()
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	// pg_ctl leaves the postmaster running with its output sent to the log
	// file; do not wait for inherited descriptors beyond a moment.
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	return strings.TrimSpace(out.String()), err
}

func (c *localCluster) logTail(n int) string {
	b, err := os.ReadFile(c.logFile)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

var binDir struct {
	once sync.Once
	dir  string
	err  error
}

// findBinDir finds a directory holding initdb, pg_ctl and postgres; see the
// package documentation for the order.
func findBinDir() (string, error) {
	binDir.once.Do(func() { binDir.dir, binDir.err = lookBinDir() })
	return binDir.dir, binDir.err
}

func lookBinDir() (string, error) {
	for _, d := range pginstall.BinDirs() {
		if pginstall.IsExecutable(filepath.Join(d, "initdb")) && pginstall.IsExecutable(filepath.Join(d, "pg_ctl")) && pginstall.IsExecutable(filepath.Join(d, "postgres")) {
			return d, nil
		}
	}
	return "", fmt.Errorf("no PostgreSQL server binaries (initdb, pg_ctl, postgres) found; looked in %s", pginstall.Looked)
}
