// Package tcpproxy is the one TCP proxy of syncguard-go's test machinery,
// put between a driver and PostgreSQL (or PgBouncer). It counts what passes
// (for the benchmarks' round-trip counts) and injects network faults (for
// the chaos suite).
//
// Counting does not trust the library under test:
//
//   - Turns: how often a client starts sending after the server has spoken
//     (or on a new connection). A client that must see a reply before it can
//     send again makes exactly one turn per round trip, however its bytes
//     are split into TCP segments.
//   - Messages: the frontend (client→server) side of the wire protocol is
//     parsed and each message counted by type. A client waits for the server
//     after a Sync ('S'), a simple Query ('Q') or a Flush ('H'), so their
//     sum (Counts.RoundTrips) is the protocol's count of round trips.
//
// The two agree when a driver behaves; a disagreement shows pipelining
// (fewer turns) or a protocol the parser does not know.
//
// Faults:
//
//   - Cut: resets connections (RST to the client, close to the server).
//   - SetDelay: adds latency to every chunk, in both directions.
//   - Blackhole: data on existing connections is read and dropped, and new
//     connections are accepted but never answered, as when the peer host is
//     partitioned away: a half-open connection. Heal ends it the way a
//     healed partition does: the server long gave up on those sessions, so
//     the client's next packet meets a reset.
//
// A userspace proxy cannot emulate a kernel-level partition: the kernel
// acknowledges everything the client sends to the proxy, so TCP keepalives
// and TCP_USER_TIMEOUT never fire here. What bounds a caller on a
// black-holed connection is the application-level timeouts (context
// deadlines, socket read deadlines, connect_timeout).
package tcpproxy

import (
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Proxy forwards the connections it accepts on 127.0.0.1 to one target.
type Proxy struct {
	ln     net.Listener
	target string

	mu        sync.Mutex
	links     map[*link]struct{}
	blackhole bool
	closed    bool
	wg        sync.WaitGroup

	delay atomic.Int64 // nanoseconds added per chunk
	c     counters
}

type counters struct {
	accepted, turns, clientBytes, serverBytes atomic.Int64
	msgs                                      [256]atomic.Int64
	untyped                                   atomic.Int64 // startup, SSLRequest, CancelRequest
}

// Counts is a snapshot of a Proxy's counters.
type Counts struct {
	Conns       int64          // client connections accepted
	Turns       int64          // client bursts that follow server data (or open a connection)
	ClientBytes int64          // forwarded client→server
	ServerBytes int64          // forwarded server→client
	Msgs        map[byte]int64 // frontend messages by type byte
	Untyped     int64          // startup-phase messages without a type byte
}

// RoundTrips is the protocol count of round trips: Sync + Query + Flush.
func (c Counts) RoundTrips() int64 { return c.Msgs['S'] + c.Msgs['Q'] + c.Msgs['H'] }

// Sub returns c - o.
func (c Counts) Sub(o Counts) Counts {
	d := Counts{
		Conns: c.Conns - o.Conns, Turns: c.Turns - o.Turns,
		ClientBytes: c.ClientBytes - o.ClientBytes, ServerBytes: c.ServerBytes - o.ServerBytes,
		Untyped: c.Untyped - o.Untyped, Msgs: map[byte]int64{},
	}
	for k, v := range c.Msgs {
		if n := v - o.Msgs[k]; n != 0 {
			d.Msgs[k] = n
		}
	}
	return d
}

// link is one proxied connection.
type link struct {
	client, server net.Conn // server is nil for a connection accepted while black-holed
	dropped        atomic.Bool
	lastFromClient atomic.Bool
	parser         frontendParser // used by the client→server pump only
}

// New listens on 127.0.0.1 (an ephemeral port) and forwards every
// connection to target (host:port).
func New(target string) (*Proxy, error) {
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

// Snapshot returns the counters now.
func (p *Proxy) Snapshot() Counts {
	c := Counts{
		Conns: p.c.accepted.Load(), Turns: p.c.turns.Load(),
		ClientBytes: p.c.clientBytes.Load(), ServerBytes: p.c.serverBytes.Load(),
		Untyped: p.c.untyped.Load(), Msgs: map[byte]int64{},
	}
	for i := range p.c.msgs {
		if n := p.c.msgs[i].Load(); n != 0 {
			c.Msgs[byte(i)] = n
		}
	}
	return c
}

// Turns is the number of client turns so far (see the package doc).
func (p *Proxy) Turns() int64 { return p.c.turns.Load() }

// Open is the number of connections open through the proxy now.
func (p *Proxy) Open() int {
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
	ls := p.snapshotLinks(func(*link) bool { return true })
	rand.Shuffle(len(ls), func(i, j int) { ls[i], ls[j] = ls[j], ls[i] })
	if n <= 0 || n > len(ls) {
		n = len(ls)
	}
	for _, l := range ls[:n] {
		l.reset()
	}
	return n
}

// Blackhole starts dropping all traffic (see the package doc) and returns
// how many established connections it caught. Heal ends it.
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
	p.mu.Unlock()
	for _, l := range p.snapshotLinks(func(l *link) bool { return l.dropped.Load() }) {
		l.reset()
	}
}

// Close stops listening, resets every connection and waits for the
// proxy's goroutines.
func (p *Proxy) Close() error {
	err := p.ln.Close()
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	for _, l := range p.snapshotLinks(func(*link) bool { return true }) {
		l.reset()
	}
	p.wg.Wait()
	return err
}

func (p *Proxy) snapshotLinks(keep func(*link) bool) []*link {
	p.mu.Lock()
	defer p.mu.Unlock()
	ls := make([]*link, 0, len(p.links))
	for l := range p.links {
		if keep(l) {
			ls = append(ls, l)
		}
	}
	return ls
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

// add registers l unless the proxy is closed.
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
		p.c.accepted.Add(1)
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

// pump copies one direction of l. The counters are updated before the
// bytes are forwarded, so the other side can only react to data already
// accounted for.
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
					p.c.turns.Add(1)
				}
				p.c.clientBytes.Add(int64(n))
				l.parser.feed(buf[:n], &p.c)
			} else {
				l.lastFromClient.Store(false)
				p.c.serverBytes.Add(int64(n))
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
			return // EOF or a closed connection: reset ends the other pump
		}
	}
}
