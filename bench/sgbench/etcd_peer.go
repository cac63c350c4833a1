package sgbench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"

	"github.com/syncguard/syncguard-go/election"
	"github.com/syncguard/syncguard-go/syncguard"
)

// The peer of the etcd workload (etcd.go): an etcd server (etcd-server
// from Debian, 3.4) that the bench starts on a temporary data directory,
// and the two systems' lockers behind one interface, so that each
// measurement runs the same code for etcd's concurrency.Mutex and
// Election and for syncguard's Lock and election.

// EtcdServer is an etcd started by the bench.
type EtcdServer struct {
	Endpoint string
	cmd      *exec.Cmd
	dir      string
	done     chan struct{}
}

// StartEtcd starts bin (default "etcd") on a temporary data directory,
// listening on two free local ports, and waits until it answers.
func StartEtcd(ctx context.Context, bin string) (*EtcdServer, error) {
	if bin == "" {
		bin = "etcd"
	}
	if _, err := exec.LookPath(bin); err != nil {
		return nil, fmt.Errorf("%s not found (apt-get install etcd-server): %w", bin, err)
	}
	dir, err := os.MkdirTemp("", "sgbench-etcd-")
	if err != nil {
		return nil, err
	}
	ports := make([]int, 2)
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		ports[i] = l.Addr().(*net.TCPAddr).Port
		l.Close()
	}
	client := fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	peer := fmt.Sprintf("http://127.0.0.1:%d", ports[1])
	cmd := exec.Command(bin, "--name", "sgbench", "--data-dir", dir+"/data",
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", "sgbench="+peer, "--log-outputs", dir+"/etcd.log", "--logger", "zap")
	cmd.Stdout, cmd.Stderr = nil, nil
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	s := &EtcdServer{Endpoint: client, cmd: cmd, dir: dir, done: make(chan struct{})}
	go func() { cmd.Wait(); close(s.done) }() //nolint:errcheck
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{client}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		s.Stop()
		return nil, err
	}
	defer cli.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, cancel := context.WithTimeout(ctx, time.Second)
		_, err := cli.Put(c, "sgbench-ready", "1")
		cancel()
		if err == nil {
			return s, nil
		}
		select {
		case <-s.done:
			log, _ := os.ReadFile(dir + "/etcd.log")
			s.Stop()
			return nil, fmt.Errorf("etcd exited: %s", tail(string(log), 600))
		default:
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			s.Stop()
			return nil, fmt.Errorf("etcd did not answer: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// Version returns the server's version.
func (s *EtcdServer) Version(ctx context.Context) string {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{s.Endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return "unknown"
	}
	defer cli.Close()
	st, err := cli.Status(ctx, s.Endpoint)
	if err != nil {
		return "unknown"
	}
	return st.Version
}

// Stop ends the server and removes its data directory.
func (s *EtcdServer) Stop() {
	if s.cmd.Process != nil {
		s.cmd.Process.Signal(syscall.SIGTERM) //nolint:errcheck
		select {
		case <-s.done:
		case <-time.After(5 * time.Second):
			s.cmd.Process.Kill() //nolint:errcheck
			<-s.done
		}
	}
	os.RemoveAll(s.dir)
}

// peerSys is one process's connection to a system: etcd or syncguard.
type peerSys interface {
	// worker returns what one worker locks with: etcd's sessions (leases)
	// are per worker (two Mutexes on one session share one key).
	worker(ctx context.Context, ttl time.Duration) (peerWorker, error)
	close()
}

type peerWorker interface {
	// lock takes key, waiting; unlock releases it.
	lock(ctx context.Context, key string) (unlock func(context.Context) error, err error)
	// campaign becomes the leader of key's election, waiting.
	campaign(ctx context.Context, key string) (resign func(context.Context) error, err error)
	close()
}

// etcdSys is etcd's v3 client.
type etcdSys struct{ cli *clientv3.Client }

func newEtcdSys(endpoint string) (*etcdSys, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return nil, err
	}
	return &etcdSys{cli}, nil
}

func (e *etcdSys) close() { e.cli.Close() }

func (e *etcdSys) worker(ctx context.Context, ttl time.Duration) (peerWorker, error) {
	secs := max(int(ttl/time.Second), 1)
	s, err := concurrency.NewSession(e.cli, concurrency.WithTTL(secs), concurrency.WithContext(ctx))
	if err != nil {
		return nil, err
	}
	return etcdWorker{s}, nil
}

type etcdWorker struct{ s *concurrency.Session }

func (w etcdWorker) close() { w.s.Close() }

func (w etcdWorker) lock(ctx context.Context, key string) (func(context.Context) error, error) {
	m := concurrency.NewMutex(w.s, "/sgbench/lock/"+key)
	if err := m.Lock(ctx); err != nil {
		return nil, err
	}
	return m.Unlock, nil
}

func (w etcdWorker) campaign(ctx context.Context, key string) (func(context.Context) error, error) {
	e := concurrency.NewElection(w.s, "/sgbench/election/"+key)
	if err := e.Campaign(ctx, strconv.Itoa(os.Getpid())); err != nil {
		return nil, err
	}
	return e.Resign, nil
}

// sgSys is syncguard: a process's pool and Backend (WaitEnv.OpenProc,
// VarNotify), shared by its workers.
type sgSys struct{ p *proc }

func (s sgSys) close() { s.p.close() }

func (s sgSys) worker(_ context.Context, ttl time.Duration) (peerWorker, error) {
	return sgWorker{s.p, ttl}, nil
}

type sgWorker struct {
	p   *proc
	ttl time.Duration
}

func (sgWorker) close() {}

func (w sgWorker) lock(ctx context.Context, key string) (func(context.Context) error, error) {
	l, err := syncguard.Lock(ctx, w.p.locker, key, &syncguard.LockOptions{TTL: w.ttl})
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) error {
		r, err := l.Release(ctx)
		if err == nil && !r.OK {
			err = fmt.Errorf("release: %s", r.Reason)
		}
		return err
	}, nil
}

func (w sgWorker) campaign(ctx context.Context, key string) (func(context.Context) error, error) {
	e, err := election.New(w.p.sg, key, &election.Options{TTL: w.ttl})
	if err != nil {
		return nil, err
	}
	t, err := e.Campaign(ctx)
	if err != nil {
		return nil, err
	}
	return t.Resign, nil
}

// openPeer opens the system a job names: Driver "etcd" (DSN: the
// endpoint), else syncguard on we.
func openPeer(ctx context.Context, we *WaitEnv, job ProcJob) (peerSys, error) {
	if job.Driver == "etcd" {
		return newEtcdSys(job.DSN)
	}
	p, err := we.OpenProc(ctx, VarNotify, max(job.Pool, 2))
	if err != nil {
		return nil, err
	}
	return sgSys{p}, nil
}

// PeerTTL is the TTL of the peer mode's workers (hand-off, elections):
// Variant "peer:<duration>".
func peerTTL(variant string) time.Duration {
	if d, err := time.ParseDuration(strings.TrimPrefix(variant, "peer:")); err == nil && d > 0 {
		return d
	}
	return 30 * time.Second
}

// IsPeerJob reports whether a -w6-proc child's job is the etcd
// workload's (ServePeer serves it).
func IsPeerJob(job ProcJob) bool {
	return job.Driver == "etcd" || strings.HasPrefix(job.Variant, "peer")
}

// ServePeer is a child process of the etcd workload. For an etcd job
// (Driver "etcd") with Groups it runs them as ServeProc does (the same
// protocol and accounting, with etcd's Mutex: a session per worker).
// In peer mode (Variant "peer:<ttl>") it answers "ready", then serves
// lines: "lock <key>" (lock, note the time, unlock: "got <unix ns>"),
// "campaign <key>" (campaign: "leader <unix ns>" once elected) and
// "resign" ("resigned").
func ServePeer(ctx context.Context, we *WaitEnv, job ProcJob, in *bufio.Reader, out io.Writer) error {
	sys, err := openPeer(ctx, we, job)
	if err != nil {
		return err
	}
	defer sys.close()
	if !strings.HasPrefix(job.Variant, "peer") {
		return serveEtcdGroups(ctx, sys, job, in, out)
	}
	w, err := sys.worker(ctx, peerTTL(job.Variant))
	if err != nil {
		return err
	}
	defer w.close()
	bw := bufio.NewWriter(out)
	fmt.Fprintln(bw, "ready")
	bw.Flush()
	var resign func(context.Context) error
	for {
		line, err := in.ReadString('\n')
		if err != nil {
			return nil // the parent closed stdin
		}
		f := strings.Fields(line)
		switch {
		case len(f) == 2 && f[0] == "lock":
			unlock, err := w.lock(ctx, f[1])
			got := time.Now().UnixNano()
			if err != nil {
				fmt.Fprintf(bw, "err %v\n", err)
			} else {
				unlock(ctx) //nolint:errcheck
				fmt.Fprintf(bw, "got %d\n", got)
			}
		case len(f) == 2 && f[0] == "campaign":
			r, err := w.campaign(ctx, f[1])
			got := time.Now().UnixNano()
			if err != nil {
				fmt.Fprintf(bw, "err %v\n", err)
			} else {
				resign = r
				fmt.Fprintf(bw, "leader %d\n", got)
			}
		case len(f) == 1 && f[0] == "resign" && resign != nil:
			err := resign(ctx)
			resign = nil
			if err != nil {
				fmt.Fprintf(bw, "err %v\n", err)
			} else {
				fmt.Fprintln(bw, "resigned")
			}
		default:
			return fmt.Errorf("unexpected command %q", line)
		}
		bw.Flush()
	}
}

// serveEtcdGroups is ServeProc's loop with etcd's Mutex.
func serveEtcdGroups(ctx context.Context, sys peerSys, job ProcJob, in *bufio.Reader, out io.Writer) error {
	type wk struct {
		g ProcGroup
		i int
		w peerWorker
	}
	var wks []wk
	defer func() {
		for _, x := range wks {
			x.w.close()
		}
	}()
	warm := fmt.Sprintf("warm:%d", os.Getpid())
	for gi, g := range job.Groups {
		for range g.Workers {
			w, err := sys.worker(ctx, 30*time.Second)
			if err != nil {
				return err
			}
			wks = append(wks, wk{g, gi, w})
			unlock, err := w.lock(ctx, warm)
			if err != nil {
				return fmt.Errorf("warm-up lock: %w", err)
			}
			if err := unlock(ctx); err != nil {
				return err
			}
		}
	}
	fmt.Fprintln(out, "ready")
	start, end, err := readGo(in)
	if err != nil {
		return err
	}
	wctx, cancel := context.WithDeadline(ctx, end)
	defer cancel()
	stats := make([]GroupStats, len(job.Groups))
	for gi, g := range job.Groups {
		stats[gi].Tag = g.Tag
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, x := range wks {
		wg.Go(func() {
			st, g := &stats[x.i], x.g
			for wctx.Err() == nil {
				t0 := time.Now()
				unlock, err := x.w.lock(wctx, g.Key)
				var h0, h1 time.Time
				if err == nil {
					h0 = time.Now()
					time.Sleep(g.Hold)
					h1 = time.Now()
					uctx, c := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
					err = unlock(uctx)
					c()
				}
				mu.Lock()
				switch {
				case err == nil:
					if !h0.Before(start) && h0.Before(end) {
						st.Acquired++
						st.Waits = append(st.Waits, h0.Sub(t0))
					}
					st.HeldNs += int64(max(minTime(h1, end).Sub(maxTime(h0, start)), 0))
				case wctx.Err() != nil || time.Now().Before(start):
				default:
					st.Errors++
					if st.FirstError == "" {
						st.FirstError = err.Error()
					}
				}
				mu.Unlock()
				select {
				case <-time.After(g.Pause):
				case <-wctx.Done():
				}
			}
		})
	}
	var res ProcResult
	time.Sleep(time.Until(start))
	c0 := cpuNow()
	time.Sleep(time.Until(end))
	res.CPUNs = cpuNow() - c0
	wg.Wait()
	res.Groups = stats
	b, err := json.Marshal(res)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(out, "%s\n", b)
	return err
}

// readGo reads ServeProc's "go <start> <end>" line.
func readGo(in *bufio.Reader) (start, end time.Time, err error) {
	line, err := in.ReadString('\n')
	if err != nil {
		return start, end, fmt.Errorf("waiting for go: %w", err)
	}
	f := strings.Fields(line)
	if len(f) != 3 || f[0] != "go" {
		return start, end, fmt.Errorf("unexpected command %q", line)
	}
	s, _ := strconv.ParseInt(f[1], 10, 64)
	e, _ := strconv.ParseInt(f[2], 10, 64)
	return time.Unix(0, s), time.Unix(0, e), nil
}
