//go:build unix

package clitest

import (
	"context"
	"net"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/syncguard/syncguard-go/tests/pgtest"
)

// The end of --wait is busy (75) unless PostgreSQL was unreachable for the
// whole wait, and then the message says why (issue 26).

// burnCPU keeps every core busy until the test ends.
func burnCPU(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range 2 * runtime.NumCPU() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ctx.Err() == nil; n++ {
				for i := 0; i < 1e5; i++ {
					n ^= i
				}
			}
		}()
	}
	t.Cleanup(func() { cancel(); wg.Wait() })
}

// run -w 200ms on a held key exits 75 every time on a busy machine: the
// first attempt (connecting included) may take longer than the wait, and
// an attempt still in flight when the wait ends says nothing about the
// server. Not parallel: it keeps the machine busy by itself.
func TestRunShortWaitOnBusyMachineIsBusy(t *testing.T) {
	d := dsn(t)
	_, k, _ := holdKey(t, d)
	burnCPU(t)
	for i := range 5 {
		r := sg(t, d, "run", "-w", "200ms", k, "--", "true")
		if r.code != 75 || !strings.Contains(r.stderr, "syncguard: run: AcquisitionTimeout: lock busy") {
			t.Errorf("run %d of -w 200ms on a held key, CPUs busy: want exit 75 (busy), got %s", i+1, r)
		}
	}
}

// slowProxy forwards to the host of dsn, each chunk after delay: a
// server far away, or a machine too loaded to answer within the wait.
func slowProxy(t *testing.T, dsn string, delay time.Duration) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil || u.Host == "" {
		t.Skipf("the test DSN is not a URL with a host: %v", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	target := u.Host
	pipe := func(from, to net.Conn) {
		defer from.Close()
		defer to.Close()
		buf := make([]byte, 32*1024)
		for {
			n, err := from.Read(buf)
			if n > 0 {
				time.Sleep(delay)
				if _, werr := to.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			go pipe(c, s)
			go pipe(s, c)
		}
	}()
	u.Host = l.Addr().String()
	return u.String()
}

// A server slower than the whole wait: the attempt is still in flight when
// --wait ends. That is no outage (nothing failed, --timeout did not run
// out): exit 75, saying there was no answer yet. Before, exit 69
// "NetworkTimeout: no answer from PostgreSQL within --timeout 15s".
func TestRunWaitEndsBeforeSlowAnswerIsBusy(t *testing.T) {
	t.Parallel()
	d := dsn(t)
	_, k, _ := holdKey(t, d)
	slow := slowProxy(t, d, 300*time.Millisecond)
	r := sg(t, "", "--dsn", slow, "run", "-w", "200ms", k, "--", "true")
	wantCode(t, r, 75)
	wantOneLineError(t, r, "syncguard: run: AcquisitionTimeout: lock busy or PostgreSQL slow: no answer yet")
}

// Nothing listens: every attempt is refused for the whole wait, and the
// error says so (exit 69), not "no answer within --timeout".
func TestRunRefusedForWholeWait(t *testing.T) {
	t.Parallel()
	srv := pgtest.Require(t)
	for _, w := range []string{"2s", "0"} {
		r := sg(t, "", "--dsn", srv.RefusedDSN(), "run", "-w", w, "k", "--", "true")
		wantCode(t, r, 69)
		wantFinalError(t, r, "syncguard: run: ServiceUnavailable: ")
		if !strings.Contains(r.stderr, "connection refused") || strings.Contains(r.stderr, "--timeout") {
			t.Errorf("-w %s against a refusing port: the error must say \"connection refused\": %s", w, r)
		}
	}
}

// wantFinalError checks that r's stderr ends with one error line starting
// with prefix, after warnings only (a wait that an outage spans warns once).
func wantFinalError(t *testing.T, r result, prefix string) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
	for _, l := range lines[:len(lines)-1] {
		if !strings.Contains(l, ": warning: ") {
			t.Errorf("want warnings, then one error line starting %q, got %s", prefix, r)
			return
		}
	}
	if !strings.HasPrefix(lines[len(lines)-1], prefix) {
		t.Errorf("want the last stderr line to start %q, got %s", prefix, r)
	}
}
