// Package chaos is syncguard-go's fault-injection suite: workers on both
// adapters acquire, extend and release contended keys through a TCP proxy
// that cuts, delays and black-holes connections, while the server's
// backends are terminated, its locks time out and the server itself
// crashes and restarts. Every run checks the lock invariants from the
// server timestamps the library returns, the error contract, recovery, and
// leaks. See docs/failure-model.md for what the runs measured.
//
// The short form runs as part of `go test ./...` in this module; the long
// form and the soak run are selected by environment variables (see the
// Makefile.inc targets chaos and soak).
package chaos

import (
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Proxy is a TCP proxy in front of PostgreSQL (or PgBouncer) that injects
// network faults into the connections passing through it:
//
//   - Cut: resets connections (RST to the client, close to the server).
//   - SetDelay: adds latency to every chunk, in both directions.
//   - Blackhole: data on existing connections is read and dropped, and new
//     connections are accepted but never answered, as when the peer host
//     is partitioned away. The client's socket stays open: a half-open
//     connection. Heal ends it the way a healed partition does: the server
//     long gave up on those sessions, so the client's next packet meets a
//     reset (the proxy resets the black-holed connections).
//
// A userspace proxy cannot emulate a kernel-level partition: the kernel
// acknowledges everything the client sends to the proxy, so TCP keepalives
// and TCP_USER_TIMEOUT never fire here. What bounds a caller on a
// black-holed connection in these tests is therefore the application-level
// timeouts (context deadlines, socket read deadlines, connect_timeout).
//
// It also counts client turns (how often the client starts sending after
// the server spoke), which is the number of protocol round trips.
type Proxy struct {
	ln     net.Listener
	target string

	mu        sync.Mutex
	links     map[*link]struct{}
	blackhole bool
	closed    bool
	wg        sync.WaitGroup

	delay    atomic.Int64 // nanoseconds added per chunk
	accepted atomic.Int64
	turns    atomic.Int64
	cuts     atomic.Int64
}

type link struct {
	client, server net.Conn // server is nil for a connection accepted while black-holed
	dropped        atomic.Bool
	lastFromClient atomic.Bool
}

// NewProxy listens on 127.0.0.1 (an ephemeral port) and forwards every
// connection to target (host:port).
func NewProxy(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, links: map[*link]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's address, host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Port is the proxy's port.
func (p *Proxy) Port() int { return p.ln.Addr().(*net.TCPAddr).Port }

// Turns is the number of client turns so far (see Proxy).
func (p *Proxy) Turns() int64 { return p.turns.Load() }

// Accepted is the number of client connections accepted so far.
func (p *Proxy) Accepted() int64 { return p.accepted.Load() }

// Conns is the number of connections open through the proxy now.
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.links)
}

// SetDelay adds d of latency to every chunk forwarded, in both directions
// (0 turns it off). A round trip then takes at least 2*d longer.
func (p *Proxy) SetDelay(d time.Duration) { p.delay.Store(int64(d)) }

// Cut resets up to n of the open connections, chosen at random (all of
// them when n <= 0), and returns how many it reset.
func (p *Proxy) Cut(n int) int {
	p.mu.Lock()
	ls := make([]*link, 0, len(p.links))
	for l := range p.links {
		ls = append(ls, l)
	}
	p.mu.Unlock()
	rand.Shuffle(len(ls), func(i, j int) { ls[i], ls[j] = ls[j], ls[i] })
	if n <= 0 || n > len(ls) {
		n = len(ls)
	}
	for _, l := range ls[:n] {
		l.reset()
	}
	p.cuts.Add(int64(n))
	return n
}

// Blackhole starts dropping all traffic (see Proxy) and returns how many
// established connections it caught. Heal ends it.
func (p *Proxy) Blackhole() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.blackhole = true
	for l := range p.links {
		l.dropped.Store(true)
	}
	return len(p.links)
}

// Heal ends a black hole: connections caught in it are reset, new
// connections are forwarded again.
func (p *Proxy) Heal() {
	p.mu.Lock()
	p.blackhole = false
	var ls []*link
	for l := range p.links {
		if l.dropped.Load() {
			ls = append(ls, l)
		}
	}
	p.mu.Unlock()
	for _, l := range ls {
		l.reset()
	}
}

// Close stops listening, resets every connection and waits for the
// proxy's goroutines.
func (p *Proxy) Close() error {
	err := p.ln.Close()
	p.mu.Lock()
	p.closed = true
	ls := make([]*link, 0, len(p.links))
	for l := range p.links {
		ls = append(ls, l)
	}
	p.mu.Unlock()
	for _, l := range ls {
		l.reset()
	}
	p.wg.Wait()
	return err
}

func (l *link) reset() {
	if tc, ok := l.client.(*net.TCPConn); ok {
		_ = tc.SetLinger(0) // RST rather than FIN
	}
	_ = l.client.Close()
	if l.server != nil {
		_ = l.server.Close()
	}
}

func (p *Proxy) add(l *link) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.links[l] = struct{}{}
	return true
}

func (p *Proxy) remove(l *link) {
	p.mu.Lock()
	delete(p.links, l)
	p.mu.Unlock()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.accepted.Add(1)
		p.mu.Lock()
		hole := p.blackhole
		p.mu.Unlock()
		l := &link{client: client}
		if hole {
			// Accepted by the kernel, never answered.
			l.dropped.Store(true)
			if !p.add(l) {
				client.Close()
				continue
			}
			p.wg.Add(1)
			go p.sink(l)
			continue
		}
		server, err := net.DialTimeout("tcp", p.target, 5*time.Second)
		if err != nil {
			l.reset()
			continue
		}
		l.server = server
		if !p.add(l) {
			l.reset()
			continue
		}
		p.wg.Add(2)
		go p.pump(l, client, server, true)
		go p.pump(l, server, client, false)
	}
}

// sink reads and drops what a black-holed client sends until the link is
// reset.
func (p *Proxy) sink(l *link) {
	defer p.wg.Done()
	defer p.remove(l)
	buf := make([]byte, 32<<10)
	for {
		if _, err := l.client.Read(buf); err != nil {
			l.reset()
			return
		}
	}
}

func (p *Proxy) pump(l *link, src, dst net.Conn, fromClient bool) {
	defer p.wg.Done()
	defer func() {
		l.reset()
		p.remove(l)
	}()
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !l.dropped.Load() {
			if fromClient {
				if !l.lastFromClient.Swap(true) {
					p.turns.Add(1)
				}
			} else {
				l.lastFromClient.Store(false)
			}
			if d := time.Duration(p.delay.Load()); d > 0 {
				time.Sleep(d)
			}
			if !l.dropped.Load() {
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return
				}
			}
		}
		if err != nil {
			return
		}
	}
}
