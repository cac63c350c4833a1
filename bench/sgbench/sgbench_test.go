package sgbench

import (
	"encoding/binary"
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
	p, err := NewProxy(ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr().String())
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

func TestPercentile(t *testing.T) {
	var d []time.Duration
	for i := 1; i <= 100; i++ {
		d = append(d, time.Duration(101-i)*time.Microsecond)
	}
	l := Summarize(d)
	if l.N != 100 || l.P50 != 50 || l.P99 != 99 {
		t.Fatalf("got %+v, want n=100 p50=50 p99=99", l)
	}
	if Percentile(nil, 0.5) != 0 {
		t.Fatal("empty")
	}
}

func TestProxyDSN(t *testing.T) {
	addr := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 6000}
	got, err := ProxyDSN("postgres://u:p@db.example:5432/x?sslmode=require&application_name=a", addr)
	if err != nil {
		t.Fatal(err)
	}
	if got != "postgres://u:p@127.0.0.1:6000/x?application_name=a&sslmode=disable" {
		t.Fatalf("url form: %s", got)
	}
	got, _ = ProxyDSN("host=db port=5432 user=u", addr)
	if got != "host=db port=5432 user=u host=127.0.0.1 port=6000 sslmode=disable" {
		t.Fatalf("keyword form: %s", got)
	}
}

func TestRotate(t *testing.T) {
	xs := []int{1, 2, 3}
	if got := rotate(xs, 4); got[0] != 2 || got[1] != 3 || got[2] != 1 {
		t.Fatalf("rotate: %v", got)
	}
}

func TestHotKeyTablesShowGapsAndWrites(t *testing.T) {
	gaps, writes := int64(0), int64(159)
	r := &WorkloadResult{Driver: "pq", Workload: "w3_hot_key", Title: "hot", Variants: []*VariantResult{
		{Name: "syncguard", Role: RoleSubject, Attempts: 15935, Wins: 436, FenceBumpsLost: &gaps, FailedWrites: &writes},
		{Name: "floor", Role: RoleFloor, Attempts: 10, Wins: 1},
	}}
	var md, txt strings.Builder
	Markdown(&md, []any{r})
	PrintWorkload(&txt, r)
	for _, want := range []string{"| fence gaps | failed attempts that wrote |", "| 0 | 159 of 15499 |", "| – | – |"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("markdown lacks %q:\n%s", want, md.String())
		}
	}
	if !strings.Contains(txt.String(), "159 of 15499") {
		t.Errorf("table lacks the write count:\n%s", txt.String())
	}
}
