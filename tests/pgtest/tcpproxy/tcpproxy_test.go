package tcpproxy

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// frontend builds client→server protocol bytes.
type frontend []byte

func (f frontend) untyped(code uint32, body string) frontend {
	var h [8]byte
	binary.BigEndian.PutUint32(h[:4], uint32(8+len(body)))
	binary.BigEndian.PutUint32(h[4:], code)
	return append(append(f, h[:]...), body...)
}

func (f frontend) msg(t byte, body string) frontend {
	var h [5]byte
	h[0] = t
	binary.BigEndian.PutUint32(h[1:], uint32(4+len(body)))
	return append(append(f, h[:]...), body...)
}

func TestFrontendParserCountsMessagesAcrossSplits(t *testing.T) {
	stream := frontend(nil).
		untyped(codeSSLRequest, "").
		untyped(196608, "user\x00postgres\x00\x00").
		msg('p', "secret\x00").
		msg('P', "\x00SELECT 1\x00\x00\x00").msg('B', strings.Repeat("x", 70000)).msg('E', "\x00\x00\x00\x00\x00").msg('S', "").
		msg('Q', "BEGIN\x00").
		msg('B', "abc").msg('E', "\x00\x00\x00\x00\x00").msg('S', "")
	// Feed the stream in every chunk size from 1 byte up: message
	// boundaries must not depend on how TCP splits the bytes.
	for _, chunk := range []int{1, 2, 3, 5, 7, 8, 64, 1000, len(stream)} {
		var p frontendParser
		var c counters
		for b := []byte(stream); len(b) > 0; {
			n := min(chunk, len(b))
			p.feed(b[:n], &c)
			b = b[n:]
		}
		got := map[byte]int64{}
		for i := range c.msgs {
			if n := c.msgs[i].Load(); n != 0 {
				got[byte(i)] = n
			}
		}
		want := map[byte]int64{'p': 1, 'P': 1, 'B': 2, 'E': 2, 'S': 2, 'Q': 1}
		if len(got) != len(want) {
			t.Fatalf("chunk %d: messages %v, want %v", chunk, got, want)
		}
		for k, v := range want {
			if got[k] != v {
				t.Fatalf("chunk %d: %q = %d, want %d (all: %v)", chunk, k, got[k], v, got)
			}
		}
		if u := c.untyped.Load(); u != 2 {
			t.Fatalf("chunk %d: untyped = %d, want 2", chunk, u)
		}
	}
}

// TestProxyCountsTurns runs a fake request/response server behind the proxy:
// each request, however split into writes, is one turn.
func TestProxyCountsTurns(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		buf := make([]byte, 4)
		for {
			// one request = 4 bytes; reply 1 byte
			if _, err := io.ReadFull(c, buf); err != nil {
				return
			}
			if _, err := c.Write([]byte{'Z'}); err != nil {
				return
			}
		}
	}()
	p, err := New(ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	reply := make([]byte, 1)
	for i := range 10 {
		// split the request into two writes with a pause: still one turn
		c.Write([]byte{0, 0})
		if i%2 == 0 {
			time.Sleep(2 * time.Millisecond)
		}
		c.Write([]byte{0, byte(i)})
		if _, err := io.ReadFull(c, reply); err != nil {
			t.Fatal(err)
		}
	}
	s := p.Snapshot()
	if s.Turns != 10 || s.Conns != 1 || s.ClientBytes != 40 || s.ServerBytes != 10 {
		t.Fatalf("turns %d conns %d client %d server %d, want 10 1 40 10", s.Turns, s.Conns, s.ClientBytes, s.ServerBytes)
	}
}

// echoServer answers every byte with the same byte.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

func echo(c net.Conn, b byte) error {
	if _, err := c.Write([]byte{b}); err != nil {
		return err
	}
	got := make([]byte, 1)
	if _, err := io.ReadFull(c, got); err != nil {
		return err
	}
	if got[0] != b {
		return io.ErrUnexpectedEOF
	}
	return nil
}

// Cut resets open connections; Blackhole swallows traffic on them and
// leaves new ones unanswered; Heal resets what it caught and forwards
// again.
func TestProxyFaults(t *testing.T) {
	p, err := New(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	dial := func() net.Conn {
		c, err := net.Dial("tcp", p.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	a := dial()
	if err := echo(a, 1); err != nil {
		t.Fatalf("forwarding: %v", err)
	}
	if n := p.Cut(0); n != 1 {
		t.Fatalf("Cut reset %d connections, want 1", n)
	}
	if err := echo(a, 2); err == nil {
		t.Fatal("a cut connection must fail")
	}

	b := dial()
	if err := echo(b, 3); err != nil {
		t.Fatalf("a new connection after a cut: %v", err)
	}
	if n := p.Blackhole(); n != 1 {
		t.Fatalf("Blackhole caught %d connections, want 1", n)
	}
	c := dial() // accepted, never answered
	for _, conn := range []net.Conn{b, c} {
		conn.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		var ne net.Error
		if err := echo(conn, 4); err == nil || !errors.As(err, &ne) || !ne.Timeout() {
			t.Fatalf("black-holed connection: want no answer (a read timeout), got %v", err)
		}
		conn.SetReadDeadline(time.Time{})
	}
	p.Heal()
	if err := echo(b, 5); err == nil {
		t.Fatal("a connection caught in the black hole is reset by Heal")
	}
	if err := echo(dial(), 6); err != nil {
		t.Fatalf("forwarding after Heal: %v", err)
	}
	if s := p.Snapshot(); s.Conns != 4 {
		t.Errorf("accepted %d connections, want 4", s.Conns)
	}
}
