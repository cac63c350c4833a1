// Command quickstart runs a nightly report at most once at a time across
// the fleet, and writes the report with its lock's fence.
package main

import (
	"context"
	"database/sql"
	"errors"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	_ "github.com/syncguard/syncguard-go/pgxstd" // pgx/v5's "pgx" driver, and its syncguard dialect
	"github.com/syncguard/syncguard-go/syncguard"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Getenv("DATABASE_URL")); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, dsn string) error {
	// With lib/pq instead: import sgpq "github.com/syncguard/syncguard-go/pq",
	// then connector, err := sgpq.NewConnector(dsn); db := sql.OpenDB(connector)
	// (waiters are then woken the moment the lock is released).
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	if err := setup(ctx, db); err != nil {
		return err
	}
	locks, err := syncguard.New(db, nil)
	if err != nil {
		return err
	}

	// Run the job at most once at a time across the fleet: retries for up to
	// 5 s, releases when fn returns (even if ctx was cancelled meanwhile).
	err = syncguard.WithLock(ctx, locks, "jobs:nightly-report",
		func(ctx context.Context, lease *syncguard.Lease) error {
			return buildReport(ctx, db, lease.Fence())
		},
		&syncguard.LockOptions{TTL: time.Minute, AutoExtend: true})
	switch {
	case errors.Is(err, syncguard.ErrServiceUnavailable), errors.Is(err, syncguard.ErrNetworkTimeout):
		return err // PostgreSQL was unreachable for the whole wait
	case errors.Is(err, syncguard.ErrAcquisitionTimeout):
		log.Print("another instance held the lock the whole time: the report was not built")
		return nil
	}
	// errors.Is(err, syncguard.ErrLockLost): auto-extension could not keep the
	// lock; fn's ctx was cancelled before the lock's expiry, with that cause.
	return err
}

// setup runs once, at deploy time (or apply schema.sql and the table with
// your migration tool).
func setup(ctx context.Context, db *sql.DB) error {
	if err := syncguard.SetupSchema(ctx, db, nil); err != nil {
		return err
	}
	for _, q := range []string{
		`CREATE TABLE IF NOT EXISTS reports (id text PRIMARY KEY, built_at timestamptz, fence text)`,
		`INSERT INTO reports (id) VALUES ('nightly') ON CONFLICT (id) DO NOTHING`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			return err
		}
	}
	return nil
}

// errStaleFence: a newer holder of the lock wrote first; nothing was written.
var errStaleFence = errors.New("stale fence: a newer holder of the lock wrote the report")

// buildReport writes with the lock's fence. The row takes the write only if
// it has no fence yet or an older one (fences are 15-digit strings, they
// compare as text), so a holder whose lock expired during a pause cannot
// overwrite a newer holder's report.
func buildReport(ctx context.Context, db *sql.DB, fence syncguard.Fence) error {
	res, err := db.ExecContext(ctx, `UPDATE reports SET built_at = now(), fence = $1
WHERE id = 'nightly' AND (fence IS NULL OR fence < $1)`, string(fence))
	if err != nil {
		return err
	}
	n, err := res.RowsAffected()
	if err == nil && n == 0 {
		err = errStaleFence
	}
	return err
}
