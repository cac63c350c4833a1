// Command demo shows syncguard at work: a throwaway PostgreSQL, four
// workers in their own connection pools (two on lib/pq, two on pgx) racing
// for one key, each holding it for a moment. Every hand-off prints the new
// holder and its fence, which only ever goes up.
//
//	make demo
//
// Set DATABASE_URL to use an existing database instead of a throwaway one.
package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"os"
	"sync"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
	_ "github.com/lib/pq"

	"github.com/syncguard/syncguard-go/internal/pgtest"
	_ "github.com/syncguard/syncguard-go/pgxstd"
	_ "github.com/syncguard/syncguard-go/pq"
	"github.com/syncguard/syncguard-go/syncguard"
)

func main() {
	log.SetFlags(0)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	dsn := os.Getenv("DATABASE_URL")
	if dsn == "" {
		fmt.Println("starting a throwaway PostgreSQL ...")
		srv, err := pgtest.Start(ctx, pgtest.Options{Fsync: true})
		if err != nil {
			log.Fatalf("no PostgreSQL: %v (set DATABASE_URL to use your own)", err)
		}
		defer srv.Stop()
		dsn = srv.DSN
	}
	if err := run(ctx, dsn); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, dsn string) error {
	setupDB, err := sql.Open("pgx", dsn)
	if err != nil {
		return err
	}
	defer setupDB.Close()
	if err := syncguard.SetupSchema(ctx, setupDB, nil); err != nil {
		return err
	}
	fmt.Println("schema ready: tables syncguard_locks and syncguard_fence_counters")

	const key = "jobs:nightly-report"
	workers := []struct{ name, driver string }{
		{"worker-1", "postgres"}, {"worker-2", "pgx"}, {"worker-3", "postgres"}, {"worker-4", "pgx"},
	}
	driverName := map[string]string{"postgres": "lib/pq", "pgx": "pgx"}
	var (
		mu       sync.Mutex
		last     syncguard.Fence
		handoffs int
		wg       sync.WaitGroup
	)
	start := time.Now()
	for _, w := range workers {
		db, err := sql.Open(w.driver, dsn)
		if err != nil {
			return err
		}
		defer db.Close()
		b, err := syncguard.New(db, nil)
		if err != nil {
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for runs := 0; runs < 3; {
				res, err := b.Acquire(ctx, key, 5*time.Second)
				if err != nil {
					log.Printf("%s: %v", w.name, err)
					return
				}
				if !res.OK {
					time.Sleep(25 * time.Millisecond) // contended: someone else runs the job
					continue
				}
				runs++
				mu.Lock()
				handoffs++
				order := "first fence"
				if last != "" {
					order = fmt.Sprintf("> previous %s", last)
				}
				if res.Fence <= last {
					order = fmt.Sprintf("NOT > previous %s: BUG", last)
				}
				last = res.Fence
				fmt.Printf("%6.2fs  %s (%-6s) holds %q  fence %s (%s)  expires %s\n",
					time.Since(start).Seconds(), w.name, driverName[w.driver], key, res.Fence, order,
					res.ExpiresAt.Format("15:04:05.000"))
				mu.Unlock()
				time.Sleep(150 * time.Millisecond) // the job
				if rel, err := b.Release(ctx, res.LockID); err != nil || !rel.OK {
					log.Printf("%s: release: %+v %v", w.name, rel, err)
				}
				time.Sleep(40 * time.Millisecond) // let someone else in
			}
		}()
	}
	wg.Wait()
	b, err := syncguard.New(setupDB, nil)
	if err != nil {
		return err
	}
	held, err := b.IsLocked(ctx, key)
	if err != nil {
		return err
	}
	fmt.Printf("\n%d hand-offs, fences strictly increasing, last fence %s; key held now: %v\n", handoffs, last, held)
	if handoffs != 12 || held {
		return errors.New("demo invariant broken")
	}
	return nil
}
