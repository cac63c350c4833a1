package sgbench

import (
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
