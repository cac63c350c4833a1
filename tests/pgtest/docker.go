package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"time"

	"github.com/ory/dockertest/v3"
	dc "github.com/ory/dockertest/v3/docker"
)

// dockerPingTimeout bounds the check for a Docker engine, so machines
// without one lose no time.
const dockerPingTimeout = 3 * time.Second

// dockerHBA mirrors the local cluster's pg_hba.conf; clients reach the
// container from the bridge gateway rather than 127.0.0.1, hence "all".
const dockerHBA = `printf '%s\n' 'local all all trust' 'host all postgres all trust' 'host all all all scram-sha-256' > /tmp/pgtest_hba.conf && chmod 644 /tmp/pgtest_hba.conf && exec docker-entrypoint.sh "$@"`

type dockerContainer struct {
	pool *dockertest.Pool
	res  *dockertest.Resource
}

func startDocker(ctx context.Context, opts Options) (*Server, error) {
	if _, err := psqlPath(); err != nil {
		return nil, err
	}
	pool, err := dockertest.NewPool("")
	if err != nil {
		return nil, fmt.Errorf("no Docker engine: %w", err)
	}
	pctx, cancel := context.WithTimeout(ctx, dockerPingTimeout)
	err = pool.Client.PingWithContext(pctx)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("no Docker engine answers: %w", err)
	}

	fsync := "fsync=off"
	args := []string{"postgres",
		"-c", "hba_file=/tmp/pgtest_hba.conf",
		"-c", "max_connections=" + strconv.Itoa(opts.maxConnections()),
		"-c", "log_min_messages=warning",
		"-c", "shared_buffers=128MB",
		"-c", "password_encryption=scram-sha-256",
		"-c", "max_prepared_transactions=" + strconv.Itoa(maxPrepared),
	}
	if opts.Fsync {
		fsync = "fsync=on"
	} else {
		args = append(args, "-c", "full_page_writes=off")
	}
	args = append(args, "-c", fsync)

	type result struct {
		res *dockertest.Resource
		err error
	}
	ch := make(chan result, 1)
	go func() {
		res, err := pool.RunWithOptions(&dockertest.RunOptions{
			Repository: "postgres",
			Tag:        "15",
			Env:        []string{"POSTGRES_HOST_AUTH_METHOD=trust"},
			Entrypoint: []string{"sh", "-c", dockerHBA, "sh"},
			Cmd:        args,
			Labels:     map[string]string{"syncguard-pgtest": "1"},
		}, func(hc *dc.HostConfig) {
			hc.AutoRemove = true
			hc.RestartPolicy = dc.RestartPolicy{Name: "no"}
			hc.ShmSize = 256 << 20
		})
		ch <- result{res, err}
	}()
	var res *dockertest.Resource
	select {
	case r := <-ch:
		if r.err != nil {
			return nil, fmt.Errorf("starting postgres:15 container: %w", r.err)
		}
		res = r.res
	case <-ctx.Done():
		go func() { // remove the container once it exists
			if r := <-ch; r.err == nil {
				_ = pool.Purge(r.res)
			}
		}()
		return nil, ctx.Err()
	}
	d := &dockerContainer{pool: pool, res: res}
	// A backstop should the test process die without Stop.
	_ = res.Expire(3600)

	host := dockerHost(res)
	port, err := strconv.Atoi(res.GetPort("5432/tcp"))
	if err != nil {
		_ = d.destroy()
		return nil, fmt.Errorf("container publishes no port for 5432/tcp")
	}
	s := newServer(KindDocker, host, port)
	s.docker = d

	// The image's entrypoint runs initdb and a temporary unix-socket-only
	// server before the real one listens on TCP: wait for a query.
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	var last error
	for {
		if _, last = runPsql(wctx, s.DSN, "SELECT 1"); last == nil {
			break
		}
		select {
		case <-wctx.Done():
			_ = d.destroy()
			return nil, fmt.Errorf("container never accepted connections: %w", errors.Join(last, wctx.Err()))
		case <-time.After(250 * time.Millisecond):
		}
	}
	if err := s.setupRoles(ctx); err != nil {
		_ = d.destroy()
		return nil, err
	}
	return s, nil
}

// dockerHost is the address the container's published port is reached at:
// the Docker host of a tcp:// DOCKER_HOST, else the bound IP (127.0.0.1
// for a wildcard binding).
func dockerHost(res *dockertest.Resource) string {
	if u, err := url.Parse(os.Getenv("DOCKER_HOST")); err == nil && u.Scheme == "tcp" && u.Hostname() != "" {
		return u.Hostname()
	}
	ip := res.GetBoundIP("5432/tcp")
	if ip == "" || ip == "localhost" || ip == "0.0.0.0" || ip == "::" {
		return "127.0.0.1"
	}
	return ip
}

func (d *dockerContainer) destroy() error {
	if err := d.pool.Purge(d.res); err != nil {
		return fmt.Errorf("pgtest: removing container: %w", err)
	}
	return nil
}
