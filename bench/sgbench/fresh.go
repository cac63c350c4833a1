package sgbench

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/syncguard/syncguard-go/driver"
	"github.com/syncguard/syncguard-go/internal/rules"
	"github.com/syncguard/syncguard-go/syncguard"
)

// FreshRow is one variant's cost of a new server session's first rounds.
type FreshRow struct {
	Variant  string    `json:"variant"`
	Sessions int       `json:"sessions"`
	RoundP50 []float64 `json:"round_p50_ms"` // rounds 1 to freshRounds
	FirstSix float64   `json:"first_six_rounds_p50_ms"`
}

// FreshResult is the fresh-session measurement: one JSON line.
type FreshResult = TableResult[FreshRow]

const freshRounds = 7

func (FreshRow) layout() (string, []string, string) {
	cols := []string{"variant", "sessions"}
	for r := range freshRounds {
		cols = append(cols, fmt.Sprintf("round %d ms", r+1))
	}
	return "fresh: a new session's first rounds (acquire, extend, release, queued attempt, withdrawal)", append(cols, "rounds 1-6 ms"), "l"
}

func (x FreshRow) cells() []string {
	c := []string{x.Variant, fmt.Sprint(x.Sessions)}
	for _, v := range x.RoundP50 {
		c = append(c, fmt.Sprintf("%.2f", v))
	}
	return append(c, fmt.Sprintf("%.2f", x.FirstSix))
}

// FreshSessions measures what a server session pays for its first
// operations: planning. Each of sessions new connections runs freshRounds
// rounds of the five statements a Lock call that waits and one that does
// not send, timed per round, with synchronous_commit off (CPU and round
// trips, no WAL flush); the variants alternate per session; waiters poll. The ablation
// drops the statement functions, so the Backend prepares the statements
// themselves, which PostgreSQL plans with their values at each of their
// first five executions.
func FreshSessions(ctx context.Context, driverName, sqlName, dsn string, sessions int) (*FreshResult, error) {
	admin, err := sql.Open(sqlName, dsn)
	if err != nil {
		return nil, err
	}
	defer admin.Close()
	vs := []*freshVariant{{name: "statement functions (planned generically at the first call)", table: "sgbench_fresh_fn"},
		{name: "prepared statements (ablation: functions dropped)", table: "sgbench_fresh_plain", ablate: true}}
	quiet := slog.New(slog.DiscardHandler)
	cfgOf := func(v *freshVariant) *syncguard.Config {
		return &syncguard.Config{TableName: v.table, FenceTableName: v.table + "_fences", Logger: quiet}
	}
	for _, v := range vs {
		if err := DropTables(ctx, admin, v.table, v.table+"_fences", v.table+"_waiters", v.table+"_holders"); err != nil {
			return nil, err
		}
		defer DropTables(context.WithoutCancel(ctx), admin, v.table, v.table+"_fences", v.table+"_waiters", v.table+"_holders") //nolint:errcheck
		if err := syncguard.SetupSchema(ctx, admin, cfgOf(v)); err != nil {
			return nil, err
		}
		if v.ablate {
			if err := dropFuncs(ctx, admin, v.table); err != nil {
				return nil, err
			}
		}
		hb, err := syncguard.New(admin, cfgOf(v))
		if err != nil {
			return nil, err
		}
		if r, err := hb.Acquire(ctx, "fresh:held", 10*time.Minute); err != nil || !r.OK {
			return nil, fmt.Errorf("fresh: hold the queue's key: %+v, %v", r, err)
		}
	}
	dialect, ok := driver.Lookup(admin.Driver())
	if !ok {
		return nil, fmt.Errorf("fresh: no dialect for %T", admin.Driver())
	}
	for s := range sessions {
		for _, v := range vs {
			if err := v.session(ctx, sqlName, dsn, dialect, cfgOf(v), s); err != nil {
				return nil, fmt.Errorf("fresh: %s: %w", v.name, err)
			}
		}
	}
	res := &FreshResult{Bench: "syncguard", Driver: driverName, Workload: "fresh",
		Method: fmt.Sprintf("%d new connections per variant, alternating; on each a new Backend runs %d rounds of Acquire (a free key), Extend, Release, a queued attempt behind a held key and its withdrawal (Leave), polling (no LISTEN); synchronous_commit = off; p50 over sessions", sessions, freshRounds)}
	for _, v := range vs {
		row := FreshRow{Variant: v.name, Sessions: sessions}
		for r := range freshRounds {
			row.RoundP50 = append(row.RoundP50, Summarize(v.lat[r]).P50/1e3)
		}
		row.FirstSix = Summarize(v.totals).P50 / 1e3
		res.Rows = append(res.Rows, row)
	}
	return res, nil
}

type freshVariant struct {
	name, table string
	ablate      bool
	lat         [freshRounds][]time.Duration
	totals      []time.Duration
}

// session runs one fresh session's rounds.
func (v *freshVariant) session(ctx context.Context, sqlName, dsn string, d driver.Dialect, cfg *syncguard.Config, s int) error {
	db, err := sql.Open(sqlName, dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	if _, err := db.ExecContext(ctx, "SET synchronous_commit = off"); err != nil {
		return err
	}
	c := *cfg
	c.Dialect = noListen{fwdDialect{d}} // the waiter polls: no LISTEN connection
	b, err := syncguard.New(db, &c)
	if err != nil {
		return err
	}
	defer b.Close()
	var total time.Duration
	for r := range freshRounds {
		t0 := time.Now()
		res, err := b.Acquire(ctx, fmt.Sprintf("fresh:%d:%d", s, r), time.Minute)
		if err != nil || !res.OK {
			return fmt.Errorf("acquire: %+v, %v", res, err)
		}
		if _, err := b.Extend(ctx, res.LockID, time.Minute); err != nil {
			return err
		}
		if _, err := b.Release(ctx, res.LockID); err != nil {
			return err
		}
		w := b.Queue("fresh:held", "", false)
		if res, err := w.Attempt(ctx, time.Minute); err != nil || res.OK {
			return fmt.Errorf("queued attempt behind the holder: %+v, %v", res, err)
		}
		if err := w.Leave(ctx); err != nil {
			return err
		}
		d := time.Since(t0)
		v.lat[r] = append(v.lat[r], d)
		if r < 6 {
			total += d
		}
	}
	v.totals = append(v.totals, total)
	return nil
}

// dropFuncs drops table's statement functions.
func dropFuncs(ctx context.Context, db *sql.DB, table string) error {
	rows, err := db.QueryContext(ctx, `SELECT p.oid::regprocedure::text FROM pg_proc AS p WHERE p.proname LIKE $1 AND p.pronamespace = current_schema()::regnamespace`,
		strings.ReplaceAll(table, "_", `\_`)+`\_op\_%`)
	if err != nil {
		return err
	}
	var fns []string
	for rows.Next() {
		var f string
		if err := rows.Scan(&f); err != nil {
			rows.Close()
			return err
		}
		fns = append(fns, f)
	}
	rows.Close()
	if len(fns) == 0 {
		return fmt.Errorf("no statement functions of %s", rules.QuoteIdent(table))
	}
	for _, f := range fns {
		if _, err := db.ExecContext(ctx, "DROP FUNCTION "+f); err != nil {
			return err
		}
	}
	return nil
}
