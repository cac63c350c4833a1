package sgbench

import (
	"context"
	"database/sql"
	"fmt"
	"maps"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/syncguard/syncguard-go/tests/pgtest/tcpproxy"
)

// ProxyDSN returns dsn with its host and port replaced by 127.0.0.1:port
// (a tcpproxy.Proxy's) and TLS
// disabled (the proxy reads the protocol in the clear). It accepts libpq's
// URL and keyword/value forms.
func ProxyDSN(dsn string, proxyPort int) (string, error) {
	host, port := "127.0.0.1", strconv.Itoa(proxyPort)
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return "", err
		}
		u.Host = net.JoinHostPort(host, port)
		q := u.Query()
		q.Set("sslmode", "disable")
		u.RawQuery = q.Encode()
		return u.String(), nil
	}
	// keyword/value: later keywords win in libpq, lib/pq and pgx alike.
	return fmt.Sprintf("%s host=%s port=%s sslmode=disable", dsn, host, port), nil
}

// RTRow is the measured round trips of one operation in steady state.
type RTRow struct {
	Op          string             `json:"op"`
	N           int                `json:"n"`
	RoundTrips  float64            `json:"round_trips_per_op"` // Sync + Query + Flush messages
	Turns       float64            `json:"turns_per_op"`       // client bursts after server data
	Messages    map[string]float64 `json:"messages_per_op"`
	ConnsOpened int64              `json:"conns_opened"`
	ClientBytes float64            `json:"client_bytes_per_op"`
	ServerBytes float64            `json:"server_bytes_per_op"`
	Subject     bool               `json:"syncguard"`
}

// RTResult is the round-trip table of one driver: one JSON line.
type RTResult = TableResult[RTRow]

var msgNames = map[byte]string{
	'S': "Sync", 'Q': "Query", 'H': "Flush", 'P': "Parse", 'B': "Bind", 'E': "Execute",
	'D': "Describe", 'C': "Close", 'X': "Terminate", 'p': "Password", 'd': "CopyData",
	'c': "CopyDone", 'f': "CopyFail", 'F': "FunctionCall",
}

// RoundTrips counts the client→server traffic of each operation through a
// counting proxy. db must be a one-connection pool opened on the proxy's
// DSN, so that every statement is prepared on the one connection during the
// warm-up pass and the measured pass sees steady state only.
func RoundTrips(ctx context.Context, driverName string, db *sql.DB, p *tcpproxy.Proxy, n int) (*RTResult, error) {
	lk, err := NewLockers(ctx, db)
	if err != nil {
		return nil, err
	}
	defer lk.Close()
	sg, ref, floor := lk.SG, lk.Ref, lk.Floor

	var rows []RTRow
	measuring := false
	measure := func(op string, subject bool, count int, fn func(i int) error) error {
		before := p.Snapshot()
		for i := range count {
			if err := fn(i); err != nil {
				return fmt.Errorf("%s: %w", op, err)
			}
		}
		if !measuring {
			return nil
		}
		d := p.Snapshot().Sub(before)
		f := float64(count)
		r := RTRow{Op: op, N: count, RoundTrips: float64(d.RoundTrips()) / f, Turns: float64(d.Turns) / f,
			Messages: map[string]float64{}, ConnsOpened: d.Conns,
			ClientBytes: float64(d.ClientBytes) / f, ServerBytes: float64(d.ServerBytes) / f, Subject: subject}
		for t, c := range d.Msgs {
			name := msgNames[t]
			if name == "" {
				name = string(rune(t))
			}
			r.Messages[name] = float64(c) / f
		}
		rows = append(rows, r)
		return nil
	}
	expect := func(want bool) func(bool, error) error {
		return func(ok bool, err error) error {
			if err == nil && ok != want {
				err = fmt.Errorf("ok = %v, want %v", ok, want)
			}
			return err
		}
	}
	pass := func(tag string, count int) error {
		ttl := time.Minute
		lockers := []struct {
			name    string
			subject bool
			l       Locker
			reads   []Locker
			rnames  []string
		}{
			{"syncguard", true, sg, []Locker{sg.With("isLocked"), sg.With("lookupKey"), sg.With("lookupID")}, []string{"IsLocked", "LookupKey", "LookupID"}},
			{"reference", false, ref, []Locker{ref}, []string{"read by key"}},
			{"floor", false, floor, []Locker{floor, floor.WithSelect1()}, []string{"SELECT by PK", "SELECT 1"}},
		}
		for _, lk := range lockers {
			keys := make([]string, count)
			ids := make([]string, count)
			for i := range keys {
				keys[i] = fmt.Sprintf("rt:%s:%s:%d", tag, lk.name, i)
			}
			acqName, relName, extName, lockedName := lk.name+" acquire", lk.name+" release", lk.name+" extend", lk.name+" acquire (held: locked)"
			if lk.name == "floor" {
				acqName, relName, extName, lockedName = "floor INSERT", "floor DELETE", "floor UPDATE", "floor INSERT (conflict: nothing)"
			}
			steps := []struct {
				name string
				fn   func(i int) error
			}{
				{acqName, func(i int) error {
					id, ok, err := lk.l.Acquire(ctx, keys[i], ttl)
					ids[i] = id
					return expect(true)(ok, err)
				}},
				{lockedName, func(i int) error {
					_, ok, err := lk.l.Acquire(ctx, keys[i], ttl)
					return expect(false)(ok, err)
				}},
				{extName, func(i int) error { return expect(true)(lk.l.Extend(ctx, ids[i], ttl)) }},
			}
			for j, rl := range lk.reads {
				steps = append(steps, struct {
					name string
					fn   func(i int) error
				}{lk.name + " " + lk.rnames[j], func(i int) error { return rl.Read(ctx, keys[i], ids[i]) }})
			}
			steps = append(steps, struct {
				name string
				fn   func(i int) error
			}{relName, func(i int) error { return expect(true)(lk.l.Release(ctx, ids[i])) }})
			for _, s := range steps {
				if err := measure(s.name, lk.subject, count, s.fn); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := pass("warm", 3); err != nil {
		return nil, err
	}
	measuring = true
	if err := pass("measure", n); err != nil {
		return nil, err
	}
	// A pooled connection idle for more than a second: pgx's stdlib pings
	// it before handing it out (ResetSession); lib/pq does not.
	id, ok, err := sg.Acquire(ctx, "rt:idle", time.Minute)
	if err != nil || !ok {
		return nil, fmt.Errorf("idle: acquire: %v %v", ok, err)
	}
	if err := measure("syncguard extend after 1.1 s idle (driver behaviour)", false, 2, func(int) error {
		time.Sleep(1100 * time.Millisecond)
		return expect(true)(sg.Extend(ctx, id, time.Minute))
	}); err != nil {
		return nil, err
	}
	if _, err := sg.Release(ctx, id); err != nil {
		return nil, err
	}
	res := &RTResult{Bench: "syncguard", Driver: driverName, Workload: "round_trips",
		Method: "counting TCP proxy, one pooled connection, statements already prepared; round_trips = Sync+Query+Flush messages sent by the client, turns = client sends that follow server data", Rows: rows}
	for _, r := range rows {
		if r.Subject {
			res.Targets = append(res.Targets, Target{Name: "round trips per " + r.Op, Value: r.RoundTrips, Goal: "== 1", Met: r.RoundTrips == 1 && r.Turns == 1})
		}
	}
	return res, nil
}

// MsgSummary formats a per-op message map compactly, e.g. "Bind 1, Execute 1, Sync 1".
func MsgSummary(m map[string]float64) string {
	var b strings.Builder
	for i, k := range slices.Sorted(maps.Keys(m)) {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %s", k, trimFloat(m[k]))
	}
	return b.String()
}

func trimFloat(f float64) string {
	s := strconv.FormatFloat(f, 'f', 2, 64)
	s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	return s
}
