package chaos

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lib/pq"

	sgpq "github.com/syncguard/syncguard-go/pq"
	"github.com/syncguard/syncguard-go/syncguard"
	"github.com/syncguard/syncguard-go/tests/pgtest"
	"github.com/syncguard/syncguard-go/tests/pgtest/tcpproxy"
)

// TestHalfOpen shows which timeout releases a caller whose connection is
// black-holed (the peer vanished; the socket stays open), for each driver
// and configuration, in two phases: a pooled connection that goes silent
// mid-operation, and a new connection whose startup is never answered.
// The black hole heals after healAfter; a caller still waiting then was
// bounded by nothing but the heal.
//
// Bounded configurations must return within their bound. lib/pq without a
// read deadline is expected to wait for the heal (it does not stop reading
// when the context ends): it is logged, not asserted, so that a lib/pq that
// learns to stop does not fail the test.
func TestHalfOpen(t *testing.T) {
	srv := pgtest.Require(t)
	t.Parallel()
	const (
		opTimeout = time.Second
		healAfter = 6 * time.Second
	)
	type config struct {
		name   string
		open   func(dsn string) *sql.DB
		params string        // added to the DSN
		bound  time.Duration // 0: expected to hang until the heal
		// helper runs syncguard.Lock with a context without deadline and
		// Acquisition.Timeout = opTimeout, instead of Backend.Acquire with
		// a context deadline.
		helper bool
	}
	pqWith := func(d pq.Dialer) func(string) *sql.DB {
		return func(dsn string) *sql.DB {
			c, err := pq.NewConnector(dsn)
			if err != nil {
				t.Fatal(err)
			}
			if d != nil {
				c.Dialer(d)
			}
			return sql.OpenDB(c)
		}
	}
	pgx := func(dsn string) *sql.DB {
		db, err := sql.Open("pgx", dsn)
		if err != nil {
			t.Fatal(err)
		}
		return db
	}
	dd := sgpq.DeadlineDialer{ReadTimeout: 2 * time.Second}
	configs := []config{
		{name: "pgx, ctx deadline 1s, connect_timeout=2", open: pgx, params: "&connect_timeout=2", bound: opTimeout + 500*time.Millisecond},
		{name: "pgx, helper Lock (Acquisition.Timeout 1s), ctx without deadline", open: pgx, params: "&connect_timeout=2",
			bound: opTimeout + 500*time.Millisecond, helper: true},
		{name: "lib/pq, ctx deadline 1s, connect_timeout=2, DeadlineDialer read 2s", open: pqWith(dd), params: "&connect_timeout=2",
			bound: 2*time.Second + 500*time.Millisecond},
		{name: "lib/pq, helper Lock (Acquisition.Timeout 1s), DeadlineDialer read 2s", open: pqWith(dd), params: "&connect_timeout=2",
			bound: 2*time.Second + 500*time.Millisecond, helper: true},
		{name: "lib/pq, ctx deadline 1s, connect_timeout=2, default dialer", open: pqWith(nil), params: "&connect_timeout=2"},
		{name: "lib/pq, ctx deadline 1s, no connect_timeout, default dialer", open: pqWith(nil)},
		{name: "pgx, ctx deadline 1s, no connect_timeout", open: pgx, bound: opTimeout + 500*time.Millisecond},
	}
	type result struct {
		cfg          config
		phase        string
		took         time.Duration
		outcome      string
		pastHealWait bool
	}
	var (
		mu      sync.Mutex
		results []result
		wg      sync.WaitGroup
	)
	run := func(c config, phase string) {
		defer wg.Done()
		p, err := tcpproxy.New(net.JoinHostPort(srv.Host, fmt.Sprint(srv.Port)))
		if err != nil {
			t.Error(err)
			return
		}
		defer p.Close()
		db := c.open(fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable%s", p.Port(), c.params))
		defer db.Close()
		db.SetMaxOpenConns(1)
		b, err := syncguard.New(db, &syncguard.Config{})
		if err != nil {
			t.Error(err)
			return
		}
		ctx := context.Background()
		if phase == "pooled connection" {
			// Establish the pooled connection first.
			if err := db.PingContext(ctx); err != nil {
				t.Errorf("%s: ping: %v", c.name, err)
				return
			}
		}
		p.Blackhole()
		timer := time.AfterFunc(healAfter, p.Heal)
		defer timer.Stop()
		key := "halfopen:" + strings.ReplaceAll(c.name, " ", "")
		start := time.Now()
		var outcome string
		if c.helper {
			l, err := syncguard.Lock(ctx, b, key, &syncguard.LockOptions{TTL: 5 * time.Second,
				Acquisition: syncguard.AcquisitionOptions{Timeout: opTimeout}})
			outcome = fmt.Sprint(err)
			if err == nil {
				l.Close()
			}
		} else {
			octx, cancel := context.WithTimeout(ctx, opTimeout)
			_, err := b.Acquire(octx, key, 5*time.Second)
			cancel()
			outcome = fmt.Sprint(err)
		}
		took := time.Since(start)
		past := took >= healAfter-200*time.Millisecond
		mu.Lock()
		results = append(results, result{cfg: c, phase: phase, took: took, outcome: outcome, pastHealWait: past})
		mu.Unlock()
	}
	for _, c := range configs {
		for _, phase := range []string{"pooled connection", "new connection"} {
			wg.Add(1)
			go run(c, phase)
		}
	}
	wg.Wait()
	var b strings.Builder
	for _, r := range results {
		verdict := "bounded"
		if r.pastHealWait {
			verdict = fmt.Sprintf("NOT bounded: waited until the black hole healed after %v", healAfter)
		}
		fmt.Fprintf(&b, "  %-72s %-17s %6dms  %s\n      -> %s\n", r.cfg.name, r.phase, r.took.Milliseconds(), verdict, firstLine(r.outcome))
		switch {
		case r.cfg.bound > 0 && r.pastHealWait:
			// The bound is what the configuration promises on an idle
			// machine (the log shows each timing); the test fails only on
			// what no load explains: waiting for the heal, healAfter later.
			t.Errorf("rule: a caller on a half-open connection is released by its deadline (%v here), not when the connection heals; %s (%s) took %v: %s",
				r.cfg.bound, r.cfg.name, r.phase, r.took.Round(time.Millisecond), r.outcome)
		case r.outcome == "<nil>":
			t.Errorf("%s (%s): the operation succeeded through a black hole", r.cfg.name, r.phase)
		case !strings.Contains(r.outcome, "syncguard:"):
			t.Errorf("%s (%s): not a *syncguard.Error: %s", r.cfg.name, r.phase, r.outcome)
		}
	}
	t.Logf("half-open connections (black hole healed after %v):\n%s", healAfter, b.String())
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > 220 {
		s = s[:220] + "..."
	}
	return s
}
