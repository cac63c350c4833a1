//go:build unix

package clitest

import (
	"context"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/syncguard/syncguard-go/syncguard"
	"github.com/syncguard/syncguard-go/tests/pgtest"
)

// proxy is a TCP proxy in front of PostgreSQL that can black-hole the
// traffic: connections stay open and bytes are dropped, as on a network
// partition, so that every statement waits for its deadline.
type proxy struct {
	l      net.Listener
	target string
	dark   atomic.Bool
	// dropped counts, while dark, accepted connections and dropped reads:
	// the client's attempts.
	dropped atomic.Int64
	mu      sync.Mutex
	conns   map[net.Conn]bool
}

// startProxy starts a proxy to the host:port of dsn and returns it with
// dsn rewritten to go through it.
func startProxy(t *testing.T, dsn string) (*proxy, string) {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil || u.Host == "" {
		t.Skipf("the test DSN is not a URL with a host: %v", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{l: l, target: u.Host, conns: map[net.Conn]bool{}}
	t.Cleanup(func() {
		l.Close()
		p.closeAll()
	})
	go p.serve()
	u.Host = l.Addr().String()
	return p, u.String()
}

func (p *proxy) serve() {
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		if p.dark.Load() {
			p.dropped.Add(1)
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns[c], p.conns[s] = true, true
		p.mu.Unlock()
		go p.pipe(c, s)
		go p.pipe(s, c)
	}
}

func (p *proxy) pipe(from, to net.Conn) {
	defer from.Close()
	defer to.Close()
	buf := make([]byte, 32*1024)
	for {
		n, err := from.Read(buf)
		if n > 0 {
			if p.dark.Load() {
				p.dropped.Add(1)
			} else if _, werr := to.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// setDark turns the black hole on or off. Turning it off closes every
// connection, whose streams lost bytes: clients reconnect.
func (p *proxy) setDark(on bool) {
	p.dark.Store(on)
	if !on {
		p.closeAll()
	}
}

func (p *proxy) closeAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
}

// waitDropped waits until the proxy dropped n more attempts than it had
// when called (measured from before).
func (p *proxy) waitDropped(t *testing.T, before, n int64) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for p.dropped.Load() < before+n {
		if time.Now().After(deadline) {
			t.Fatalf("the client made %d attempts through the dark proxy within 2m, want %d", p.dropped.Load()-before, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// alive reports whether pid is a live process (not gone, not a zombie).
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return syscall.Kill(pid, 0) == nil
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// waitGone waits until none of pids is alive.
func waitGone(t *testing.T, what string, pids ...int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for _, pid := range pids {
		for alive(pid) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: process %d still alive after 1m", what, pid)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// readPid waits for a file holding a pid and returns it.
func readPid(t *testing.T, path string) int {
	t.Helper()
	s := waitFile(t, path, time.Minute)
	pid, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil {
		// The file may be read while being written: try once more.
		time.Sleep(50 * time.Millisecond)
		b, _ := os.ReadFile(path)
		if pid, err = strconv.Atoi(strings.TrimSpace(string(b))); err != nil {
			t.Fatalf("%s: %q is not a pid", path, b)
		}
	}
	return pid
}

// childrenOf returns the pids whose parent is pid.
func childrenOf(pid int) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		f := strings.Fields(s[i+1:])
		if len(f) > 1 && f[1] == strconv.Itoa(pid) {
			out = append(out, n)
		}
	}
	return out
}

// takeOver acquires key for another holder as soon as it can (polling),
// and calls check at once when it got it. It runs until ctx ends.
func takeOver(ctx context.Context, t *testing.T, b *syncguard.Backend, key string, check func()) error {
	for {
		res, err := b.Acquire(ctx, key, time.Minute)
		if err == nil && res.OK {
			check()
			t.Cleanup(func() { b.Release(context.Background(), res.LockID) })
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// pty is a pseudo-terminal: the master side for the test, the slave side
// for syncguard, which gets it as its controlling terminal.
type pty struct {
	master, slave *os.File
	out           pgtest.Buffer
}

const (
	tiocsptlck = 0x40045431 // TIOCSPTLCK
	tiocgptn   = 0x80045430 // TIOCGPTN
)

func openPTY(t *testing.T) *pty {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals: %v", err)
	}
	var unlock int32
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, m.Fd(), tiocsptlck, uintptrOf(&unlock)); e != 0 {
		m.Close()
		t.Fatalf("TIOCSPTLCK: %v", e)
	}
	var n uint32
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, m.Fd(), tiocgptn, uintptrOf32(&n)); e != 0 {
		m.Close()
		t.Fatalf("TIOCGPTN: %v", e)
	}
	s, err := os.OpenFile("/dev/pts/"+strconv.Itoa(int(n)), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		m.Close()
		t.Fatal(err)
	}
	p := &pty{master: m, slave: s}
	go func() { _, _ = io.Copy(&p.out, m) }()
	t.Cleanup(func() {
		s.Close()
		m.Close()
	})
	return p
}

// startOnTTY starts syncguard as the session leader of a pty, in the
// terminal's foreground process group, as a shell would.
func startOnTTY(t *testing.T, tty *pty, environ []string, args ...string) *proc {
	t.Helper()
	p := &proc{done: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = environ
	p.cmd.Stdin, p.cmd.Stdout, p.cmd.Stderr = tty.slave, tty.slave, tty.slave
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	p.begin(t)
	return p
}

func uintptrOf(p *int32) uintptr    { return uintptr(unsafe.Pointer(p)) }
func uintptrOf32(p *uint32) uintptr { return uintptr(unsafe.Pointer(p)) }
