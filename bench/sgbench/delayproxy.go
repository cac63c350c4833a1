package sgbench

import (
	"net"
	"sync"
	"time"
)

// DelayProxy forwards connections accepted on 127.0.0.1 to one target and
// delays every chunk by a fixed latency in each direction, as a link to a
// far client does: a delay line, not a throughput cap. Each chunk is due
// at the time it was read plus the delay, so chunks that follow each other
// closely (two notifications) arrive as closely, each one delay late.
// (tests/pgtest/tcpproxy's SetDelay sleeps in its copy loop instead: a
// chunk read during another's sleep waits for it, so bursts queue up; right
// for faults, not for a far client.)
type DelayProxy struct {
	ln     net.Listener
	target string
	delay  time.Duration

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// NewDelayProxy listens on an ephemeral port of 127.0.0.1.
func NewDelayProxy(target string, delay time.Duration) (*DelayProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &DelayProxy{ln: ln, target: target, delay: delay, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Port is the proxy's port.
func (p *DelayProxy) Port() int { return p.ln.Addr().(*net.TCPAddr).Port }

// Close stops listening, closes every connection and waits for the
// proxy's goroutines.
func (p *DelayProxy) Close() error {
	err := p.ln.Close()
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	return err
}

func (p *DelayProxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	for _, c := range cs {
		p.conns[c] = struct{}{}
	}
	return true
}

func (p *DelayProxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.DialTimeout("tcp", p.target, 5*time.Second)
		if err != nil {
			client.Close()
			continue
		}
		for _, c := range []net.Conn{client, server} {
			if tc, ok := c.(*net.TCPConn); ok {
				tc.SetNoDelay(true)
			}
		}
		if !p.track(client, server) {
			client.Close()
			server.Close()
			return
		}
		p.wg.Add(2)
		go p.pipe(client, server)
		go p.pipe(server, client)
	}
}

type chunk struct {
	b   []byte
	due time.Time
}

// pipe copies src to dst, each chunk delayed by p.delay from when it was
// read. Either side failing closes both.
func (p *DelayProxy) pipe(src, dst net.Conn) {
	defer p.wg.Done()
	ch := make(chan chunk, 4096)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for c := range ch {
			if d := time.Until(c.due); d > 0 {
				time.Sleep(d)
			}
			if _, err := dst.Write(c.b); err != nil {
				src.Close()
				dst.Close()
				for range ch { // drain until the reader stops
				}
				return
			}
		}
	}()
	for {
		buf := make([]byte, 32<<10)
		n, err := src.Read(buf)
		if n > 0 {
			ch <- chunk{buf[:n], time.Now().Add(p.delay)}
		}
		if err != nil {
			break
		}
	}
	close(ch)
	<-done
	src.Close()
	dst.Close()
	p.mu.Lock()
	delete(p.conns, src)
	delete(p.conns, dst)
	p.mu.Unlock()
}
