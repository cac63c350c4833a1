package main

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/syncguard/syncguard-go/tests/pgtest"
)

// server returns the DSN to benchmark, its host and port, and a cleanup.
// throwaway is the server started by server, if any (for PgBouncer).
var throwaway *pgtest.Server

func server(ctx context.Context, maxConns int) (dsn, host string, port int, cleanup func(), err error) {
	if d := os.Getenv(EnvDSN); d != "" {
		h, p, err := hostPort(d)
		if err != nil {
			return "", "", 0, nil, fmt.Errorf("%s: %w", EnvDSN, err)
		}
		return d, h, p, func() {}, nil
	}
	// A test DSN (often a fsync=off server) must not stand in for the
	// durable server the benchmark asks for.
	os.Unsetenv(pgtest.EnvDSN)
	progress("starting a throwaway PostgreSQL (fsync on)")
	sctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	srv, err := pgtest.Start(sctx, pgtest.Options{Fsync: true, MaxConnections: maxConns})
	if err != nil {
		return "", "", 0, nil, err
	}
	throwaway = srv
	return srv.DSN, srv.Host, srv.Port, func() {
		if err := srv.Stop(); err != nil {
			progress("stopping PostgreSQL: %v", err)
		}
	}, nil
}

// hostPort extracts host and port from a URL or keyword/value DSN.
func hostPort(dsn string) (string, int, error) {
	host, port := "localhost", 5432
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		rest := strings.SplitN(strings.SplitN(dsn, "://", 2)[1], "/", 2)[0]
		if i := strings.LastIndexByte(rest, '@'); i >= 0 {
			rest = rest[i+1:]
		}
		if h, p, err := net.SplitHostPort(rest); err == nil {
			n, err := strconv.Atoi(p)
			if err != nil {
				return "", 0, err
			}
			return h, n, nil
		}
		if rest != "" {
			host = rest
		}
		return host, port, nil
	}
	for _, f := range strings.Fields(dsn) {
		k, v, _ := strings.Cut(f, "=")
		v = strings.Trim(v, "'")
		switch k {
		case "host":
			host = v
		case "port":
			n, err := strconv.Atoi(v)
			if err != nil {
				return "", 0, err
			}
			port = n
		}
	}
	return host, port, nil
}

func openPool(driverName, dsn string, size int) (*sql.DB, error) {
	db, err := sql.Open(driverName, dsn)
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(size)
	db.SetMaxIdleConns(size) // the default (2) would close and reopen connections under load
	db.SetConnMaxIdleTime(0)
	db.SetConnMaxLifetime(0)
	return db, nil
}

func describe(ctx context.Context, dsn string) (map[string]string, error) {
	db, err := openPool("pgx", dsn, 1)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	info := map[string]string{"cpu": cpuModel(), "cpus": strconv.Itoa(runtime.NumCPU()), "loadavg_start": loadavg()}
	for _, s := range []string{"server_version", "fsync", "synchronous_commit", "wal_sync_method", "full_page_writes", "shared_buffers", "max_connections", "wal_level", "commit_delay"} {
		var v string
		if err := db.QueryRowContext(ctx, "SHOW "+s).Scan(&v); err != nil {
			return nil, fmt.Errorf("SHOW %s: %w", s, err)
		}
		info[s] = v
	}
	info["server_kind"] = "throwaway (tests/pgtest)"
	if os.Getenv(EnvDSN) != "" {
		info["server_kind"] = EnvDSN
	}
	return info, nil
}

// loadavg returns the 1, 5 and 15 minute load averages from /proc/loadavg.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return runtime.GOARCH
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return runtime.GOARCH
}
