package sgbench

import (
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

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
	const addr = 6000
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

// The text output and the Markdown come from one table: the same cells in
// both, and Print shows the targets TargetsOf returns.
func TestTablesRenderTheSameCellsBothWays(t *testing.T) {
	r := &WALResult{Driver: "pq", Method: "lsn delta", Rows: []WALRow{{Variant: "syncguard", Attempts: 100, WALBytes: 0}},
		Targets: []Target{{Name: "failed attempts write no WAL", Goal: "== 0", Met: true}}}
	var md, txt strings.Builder
	Markdown(&md, []any{r})
	Print(&txt, r)
	for _, want := range []string{"#### [pq] WAL written by failed acquire attempts on a held key", "Method: lsn delta.",
		"| variant | attempts | WAL bytes | bytes/attempt |\n|---|--:|--:|--:|\n| syncguard | 100 | 0 | 0.0 |\n"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("markdown lacks %q:\n%s", want, md.String())
		}
	}
	var row []string
	for _, line := range strings.Split(txt.String(), "\n") {
		if strings.HasPrefix(line, "syncguard") {
			row = strings.Fields(line)
		}
	}
	if strings.Join(row, " ") != "syncguard 100 0 0.0" {
		t.Errorf("text row %q, want the Markdown's cells:\n%s", row, txt.String())
	}
	if ts := TargetsOf(r); len(ts) != 1 || !strings.Contains(txt.String(), "[MET    ] "+ts[0].Name) {
		t.Errorf("targets %v not printed:\n%s", ts, txt.String())
	}
}

// The delay line adds its delay once per direction, and chunks sent close
// together arrive close together (no queueing behind each other's delay).
// The delay is long enough that the two differ by far more than a loaded
// machine's scheduling delays: a latency takes 2 d and a few ms, a queue at
// least 6 d (5 d one way, d back), and the bound sits at 5 d.
func TestDelayProxyIsALatencyNotAQueue(t *testing.T) {
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
		io.Copy(c, c) // echo
	}()
	const d = 200 * time.Millisecond
	p, err := NewDelayProxy(ln.Addr().String(), d)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", p.Port()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	t0 := time.Now()
	for i := range 5 { // 5 chunks, 2 ms apart
		if _, err := c.Write([]byte{byte('a' + i)}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Millisecond)
	}
	buf := make([]byte, 5)
	if _, err := io.ReadFull(c, buf); err != nil {
		t.Fatal(err)
	}
	el := time.Since(t0)
	if string(buf) != "abcde" {
		t.Fatalf("got %q", buf)
	}
	// 2 d (there and back) + 8 ms of spacing; a queue would take 6 d or more.
	if el < 2*d || el >= 5*d {
		t.Fatalf("5 chunks took %v, want about %v (a queue behind each chunk's delay takes 6 d = %v or more)", el, 2*d+8*time.Millisecond, 6*d)
	}
}

func TestSegmentGaps(t *testing.T) {
	t0 := time.Unix(0, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	a := &contentionAcc{holds: [][2]time.Time{{at(20), at(30)}, {at(0), at(10)}, {at(31), at(41)}}}
	a.segmentGaps()
	if len(a.gaps) != 2 || a.gaps[0] != 10*time.Millisecond || a.gaps[1] != time.Millisecond || len(a.holds) != 0 {
		t.Fatalf("gaps %v holds %v", a.gaps, a.holds)
	}
}
