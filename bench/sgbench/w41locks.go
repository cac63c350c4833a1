package sgbench

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"slices"
	"time"

	"github.com/syncguard/syncguard-go/internal/rules"
	"github.com/syncguard/syncguard-go/syncguard"
)

// W41Row is one phase of w41-locks: acquire+release cycles on one key,
// alone (control) or with an outsider holding the key's advisory id and
// thousands of filler advisory locks (attacker).
type W41Row struct {
	Round    int     `json:"round"`
	Phase    string  `json:"phase"`
	Cycles   int     `json:"cycles"`
	PerSec   float64 `json:"cycles_per_sec"`
	P50Us    float64 `json:"p50_us"`
	P99Us    float64 `json:"p99_us"`
	Ratio    float64 `json:"attacker_over_control,omitempty"`
	Errors   int     `json:"errors"`
	FirstErr string  `json:"first_error,omitempty"`
}

// W41Result is w41-locks' result.
type W41Result = TableResult[W41Row]

func (W41Row) layout() (string, []string, string) {
	return "w41-locks: acquire+release of one key, control vs an outsider holding the key's advisory id and " + fmt.Sprint(w41Fillers) + " filler advisory locks",
		[]string{"round", "phase", "cycles", "cycles/s", "p50 µs", "p99 µs", "attacker/control", "errors"}, "rlrrrrrr"
}

func (x W41Row) cells() []string {
	ratio := ""
	if x.Ratio > 0 {
		ratio = fmt.Sprintf("%.2f", x.Ratio)
	}
	return []string{fmt.Sprint(x.Round), x.Phase, fmt.Sprint(x.Cycles), fmt.Sprintf("%.0f", x.PerSec),
		fmt.Sprintf("%.0f", x.P50Us), fmt.Sprintf("%.0f", x.P99Us), ratio, fmt.Sprint(x.Errors)}
}

const (
	w41Fillers = 5000
	w41Table   = "w41_locks"
	w41Fences  = "w41_fences"
	w41Role    = "sg_w41_evil"
	w41Pw      = "sg-w41-evil-pw"
)

// W41Locks runs w41-locks (issue 41): per round, d of single-worker
// acquire+release cycles on a control key, then d on another key while a
// role without privileges on the lock tables holds that key's advisory id
// and w41Fillers other advisory ids (session locks, one connection). Two
// rounds, each with its ratio. dsn must be a URL (the attacker's role
// logs in with a password of its own).
func W41Locks(ctx context.Context, drv, dsn string, d time.Duration) (*W41Result, error) {
	admin, err := sql.Open(sqlDriverOf(drv), dsn)
	if err != nil {
		return nil, err
	}
	defer admin.Close()
	tables := []string{w41Table, w41Fences, w41Table + "_waiters", w41Table + "_holders"}
	if err := DropTables(ctx, admin, tables...); err != nil {
		return nil, err
	}
	defer DropTables(context.WithoutCancel(ctx), admin, tables...) //nolint:errcheck
	cfg := &syncguard.Config{TableName: w41Table, FenceTableName: w41Fences}
	if err := syncguard.SetupSchema(ctx, admin, cfg); err != nil {
		return nil, err
	}
	if _, err := admin.ExecContext(ctx, fmt.Sprintf(`DO $$ BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '%[1]s') THEN CREATE ROLE %[1]s LOGIN; END IF;
END $$; SET password_encryption = 'scram-sha-256'; ALTER ROLE %[1]s LOGIN PASSWORD '%[2]s'`, w41Role, w41Pw)); err != nil {
		return nil, err
	}
	u, err := url.Parse(dsn)
	if err != nil || u.Scheme == "" {
		return nil, fmt.Errorf("w41-locks needs a URL DSN (postgres://...), for the attacker's own role: %v", err)
	}
	u.User = url.UserPassword(w41Role, w41Pw)
	evil, err := sql.Open(sqlDriverOf(drv), u.String())
	if err != nil {
		return nil, err
	}
	defer evil.Close()
	db, err := sql.Open(sqlDriverOf(drv), dsn)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	db.SetMaxOpenConns(2)
	db.SetMaxIdleConns(2)
	b, err := syncguard.New(db, cfg)
	if err != nil {
		return nil, err
	}
	defer b.Close()

	r := &W41Result{Bench: "syncguard", Driver: drv, Workload: "w41-locks",
		Method: fmt.Sprintf("one Backend (pool of 2), one worker: Acquire (TTL 30 s) then Release, for %v per phase; control: a key nobody else touches; "+
			"attacker: a key whose advisory id (hashtext(storage key)) a role with CONNECT only holds (session lock), with %d other advisory ids, on one connection; "+
			"two rounds, control then attacker each", d, w41Fillers)}
	run := time.Now().UnixNano()
	for round := 1; round <= 2; round++ {
		control, err := w41Phase(ctx, b, fmt.Sprintf("w41:%d:%d:control", run, round), d)
		if err != nil {
			return nil, err
		}
		control.Round, control.Phase = round, "control"
		key := fmt.Sprintf("w41:%d:%d:attacked", run, round)
		release, err := w41Attack(ctx, evil, key)
		if err != nil {
			return nil, err
		}
		attacked, err := w41Phase(ctx, b, key, d)
		release()
		if err != nil {
			return nil, err
		}
		attacked.Round, attacked.Phase = round, "attacker"
		if control.PerSec > 0 {
			attacked.Ratio = attacked.PerSec / control.PerSec
		}
		r.Rows = append(r.Rows, control, attacked)
		r.Targets = append(r.Targets, Target{Name: fmt.Sprintf("w41-locks round %d: acquire+release with the attacker / control", round),
			Value: attacked.Ratio, Goal: ">= 0.8", Met: attacked.Ratio >= 0.8 && attacked.Errors == 0 && control.Errors == 0})
	}
	return r, nil
}

// w41Attack takes, on one connection of evil, key's advisory id and
// w41Fillers others; release ends the session.
func w41Attack(ctx context.Context, evil *sql.DB, key string) (release func(), err error) {
	norm, err := rules.NormalizeKey(key)
	if err != nil {
		return nil, err
	}
	storage, _, err := rules.StorageKeys(norm)
	if err != nil {
		return nil, err
	}
	conn, err := evil.Conn(ctx)
	if err != nil {
		return nil, err
	}
	var n int
	if err := conn.QueryRowContext(ctx, `SELECT count(*) FILTER (WHERE ok) FROM (
  SELECT pg_try_advisory_lock(hashtext($1)) AS ok
  UNION ALL SELECT pg_try_advisory_lock(4100000000 + g) FROM generate_series(1, $2::int) AS g) AS x`, storage, w41Fillers).Scan(&n); err != nil {
		conn.Close()
		return nil, fmt.Errorf("the attacker's advisory locks: %w", err)
	}
	if n != w41Fillers+1 {
		conn.Close()
		return nil, fmt.Errorf("the attacker took %d of %d advisory locks", n, w41Fillers+1)
	}
	return func() {
		_, _ = conn.ExecContext(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock_all()`)
		conn.Close()
	}, nil
}

func w41Phase(ctx context.Context, b *syncguard.Backend, key string, d time.Duration) (W41Row, error) {
	var row W41Row
	var lat []time.Duration
	start := time.Now()
	for time.Since(start) < d && ctx.Err() == nil {
		t0 := time.Now()
		res, err := b.Acquire(ctx, key, 30*time.Second)
		if err == nil && !res.OK {
			err = fmt.Errorf("acquire of a free key: %s", res.Reason)
		}
		if err == nil {
			var rr syncguard.ReleaseResult
			if rr, err = b.Release(ctx, res.LockID); err == nil && !rr.OK {
				err = fmt.Errorf("release: %s", rr.Reason)
			}
		}
		if err != nil {
			row.Errors++
			if row.FirstErr == "" {
				row.FirstErr = err.Error()
			}
			continue
		}
		lat = append(lat, time.Since(t0))
	}
	el := time.Since(start)
	row.Cycles = len(lat)
	row.PerSec = float64(len(lat)) / el.Seconds()
	slices.Sort(lat)
	if n := len(lat); n > 0 {
		row.P50Us = float64(lat[n/2]) / 1e3
		row.P99Us = float64(lat[min(n-1, n*99/100)]) / 1e3
	}
	return row, ctx.Err()
}
