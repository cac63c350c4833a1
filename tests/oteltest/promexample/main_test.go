package main

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/syncguard/syncguard-go/tests/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m, pgtest.Options{}) }

// series parses the Prometheus text format: "name{labels}" -> value, the
// labels as printed (sorted by the exporter).
func series(t *testing.T, body string) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	return out
}

// value finds the one series of name whose labels include all of labels
// (`key="value"` strings).
func value(t *testing.T, s map[string]float64, name string, labels ...string) (float64, bool) {
	t.Helper()
	found, n := 0.0, 0
	for k, v := range s {
		if k != name && !strings.HasPrefix(k, name+"{") {
			continue
		}
		ok := true
		for _, l := range labels {
			ok = ok && strings.Contains(k, l)
		}
		if ok {
			found, n = v, n+1
		}
	}
	if n > 1 {
		t.Fatalf("%d series of %s match %v", n, name, labels)
	}
	return found, n == 1
}

// The example program, run against a throwaway PostgreSQL, serves the
// series of its contended WithLock at /metrics.
func TestMetricsEndpointShowsAContendedWithLock(t *testing.T) {
	srv := pgtest.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dsn, err := srv.CreateDatabase(ctx, "promexample")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	const hold = 2 * time.Second
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- run(runCtx, dsn, ln, hold) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()

	url := "http://" + ln.Addr().String() + "/metrics"
	label := `syncguard_lock_label="reports"`
	var s map[string]float64
	for {
		resp, err := http.Get(url)
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			s = series(t, string(body))
			// Both holdings have ended: the workers are done.
			if n, _ := value(t, s, "syncguard_hold_duration_seconds_count", label, `syncguard_outcome="released"`); n == 2 {
				break
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no two released holdings at %s before the test's deadline; last scrape: %v", url, s)
		case err := <-done:
			t.Fatalf("the program ended: %v", err)
		case <-time.After(100 * time.Millisecond):
		}
	}

	for k, v := range s {
		if strings.HasPrefix(k, "syncguard_") {
			t.Logf("%s %v", k, v)
		}
	}
	check := func(name string, want func(float64) bool, what string, labels ...string) {
		t.Helper()
		v, ok := value(t, s, name, labels...)
		if !ok || !want(v) {
			t.Errorf("%s%v = %v (present %v), want %s", name, labels, v, ok, what)
		}
	}
	eq := func(n float64) func(float64) bool { return func(v float64) bool { return v == n } }
	scope := `otel_scope_name="github.com/syncguard/syncguard-go/otelsyncguard"`
	check("syncguard_wait_duration_seconds_count", eq(2), "2 waits", label, `syncguard_outcome="acquired"`, scope)
	// The second worker started once the first held the lock, and waited
	// until the release: its wait is the first's hold, less the moment it
	// took to start (far less than a second on any machine).
	check("syncguard_wait_duration_seconds_sum", func(v float64) bool { return v >= (hold - time.Second).Seconds() }, "about the hold of "+hold.String(), label, `syncguard_outcome="acquired"`)
	check("syncguard_hold_duration_seconds_sum", func(v float64) bool { return v >= hold.Seconds() }, "at least "+hold.String(), label, `syncguard_outcome="released"`)
	check("syncguard_acquire_attempts_total", eq(2), "2", label, `syncguard_outcome="acquired"`)
	check("syncguard_acquire_attempts_total", func(v float64) bool { return v >= 1 }, "at least 1", label, `syncguard_outcome="contended"`)
	check("syncguard_acquire_duration_seconds_count", eq(2), "2", label, `syncguard_outcome="acquired"`)
	check("syncguard_releases_total", eq(2), "2", `syncguard_outcome="ok"`)
	check("syncguard_locks_held", eq(0), "0", label)
	check("syncguard_telemetry_dropped_total", eq(0), "0")
	// pgx's LISTEN connection woke the waiter: waiting did not poll.
	check("syncguard_wait_polling", eq(0), "0 (notifications active)")
	if _, ok := value(t, s, "syncguard_losses_total"); ok {
		t.Errorf("syncguard_losses_total present without a loss")
	}
	for k := range s {
		if strings.Contains(k, "reports:daily") {
			t.Errorf("the key appears in a series: %s", k)
		}
	}
}
