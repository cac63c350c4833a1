package sgbench

import (
	"encoding/binary"
	"net"
	"sync"
	"sync/atomic"
)

// Proxy is a TCP proxy between the benchmark's drivers and PostgreSQL that
// counts what the client sends. It exists to count round trips in a way that
// does not trust the library under test:
//
//   - Messages: it parses the frontend (client→server) side of the wire
//     protocol and counts each message by type. A client has to wait for the
//     server after a Sync ('S', the end of an extended-protocol batch), a
//     simple Query ('Q') or a Flush ('H'), so their sum is the number of
//     protocol round trips.
//   - Turns: independently of any parsing, it counts how often the client
//     starts sending after the server has spoken. A client that must see a
//     reply before it can send again produces exactly one turn per round
//     trip, however its bytes are split into TCP segments.
//
// The two counts agree when a driver behaves; a disagreement would show
// pipelining (fewer turns) or a protocol the parser does not know.
type Proxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup

	c counters
}

type counters struct {
	conns, turns, clientBytes, serverBytes atomic.Int64
	msgs                                   [256]atomic.Int64
	untyped                                atomic.Int64 // startup, SSLRequest, CancelRequest
}

// Counts is a snapshot of a Proxy's counters.
type Counts struct {
	Conns       int64 // client connections accepted
	Turns       int64 // client bursts that follow server data (or open a connection)
	ClientBytes int64
	ServerBytes int64
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

// NewProxy listens on 127.0.0.1 (an ephemeral port) and forwards every
// connection to target (host:port).
func NewProxy(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's listening address.
func (p *Proxy) Addr() *net.TCPAddr { return p.ln.Addr().(*net.TCPAddr) }

// Snapshot returns the counters now.
func (p *Proxy) Snapshot() Counts {
	c := Counts{
		Conns: p.c.conns.Load(), Turns: p.c.turns.Load(),
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

// Close stops listening, closes every proxied connection and waits for the
// copying goroutines.
func (p *Proxy) Close() error {
	err := p.ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	return err
}

func (p *Proxy) track(c net.Conn, add bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if add {
		if p.conns == nil {
			return false
		}
		p.conns[c] = struct{}{}
	} else {
		delete(p.conns, c)
	}
	return true
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			client.Close()
			continue
		}
		p.track(client, true)
		p.track(server, true)
		p.c.conns.Add(1)
		pc := &proxyConn{p: p}
		p.wg.Add(2)
		go pc.pump(client, server, true)
		go pc.pump(server, client, false)
	}
}

// proxyConn holds one connection's direction state for turn counting.
type proxyConn struct {
	p        *Proxy
	mu       sync.Mutex
	lastFrom int // 0 none yet, 1 client, 2 server
	parser   frontendParser
}

func (pc *proxyConn) pump(src, dst net.Conn, fromClient bool) {
	defer pc.p.wg.Done()
	defer func() {
		src.Close()
		dst.Close()
		pc.p.track(src, false)
		pc.p.track(dst, false)
	}()
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			pc.mu.Lock()
			if fromClient {
				if pc.lastFrom != 1 {
					pc.p.c.turns.Add(1)
				}
				pc.lastFrom = 1
				pc.p.c.clientBytes.Add(int64(n))
				pc.parser.feed(buf[:n], &pc.p.c)
			} else {
				pc.lastFrom = 2
				pc.p.c.serverBytes.Add(int64(n))
			}
			pc.mu.Unlock()
			// The state is updated before the bytes are forwarded, so the
			// other side can only react to data we have already accounted.
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return // EOF or a closed connection: the deferred closes end the other pump
		}
	}
}

// Protocol codes of untyped startup-phase messages.
const (
	codeSSLRequest    = 80877103
	codeGSSENCRequest = 80877104
)

// frontendParser splits the client→server byte stream into protocol
// messages. The stream opens with untyped messages (int32 length, int32
// code, ...): SSLRequest and GSSENCRequest are followed by another untyped
// StartupMessage; after the StartupMessage (or a CancelRequest) every
// message is typed (byte type, int32 length incl. itself, body).
type frontendParser struct {
	typed bool
	hdr   [8]byte
	hn    int   // header bytes collected
	skip  int64 // body bytes still to skip
}

func (f *frontendParser) feed(b []byte, c *counters) {
	for len(b) > 0 {
		if f.skip > 0 {
			n := int64(len(b))
			if n > f.skip {
				n = f.skip
			}
			f.skip -= n
			b = b[n:]
			continue
		}
		need := 5
		if !f.typed {
			need = 8
		}
		n := copy(f.hdr[f.hn:need], b)
		f.hn += n
		b = b[n:]
		if f.hn < need {
			return
		}
		f.hn = 0
		if f.typed {
			c.msgs[f.hdr[0]].Add(1)
			f.skip = int64(binary.BigEndian.Uint32(f.hdr[1:5])) - 4
		} else {
			c.untyped.Add(1)
			f.skip = int64(binary.BigEndian.Uint32(f.hdr[0:4])) - 8
			switch binary.BigEndian.Uint32(f.hdr[4:8]) {
			case codeSSLRequest, codeGSSENCRequest:
				// another untyped message follows
			default:
				f.typed = true
			}
		}
		if f.skip < 0 {
			f.skip = 0
		}
	}
}
