package main

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	_ "github.com/syncguard/syncguard-go/pgxstd"

	"github.com/syncguard/syncguard-go/syncguard"
)

func main() {
	dsn := os.Getenv("DSN")
	n, _ := strconv.Atoi(os.Args[1])
	ctx := context.Background()
	admin, _ := sql.Open("pgx", dsn)
	cfg := &syncguard.Config{TableName: "probe_locks", FenceTableName: "probe_fences", Logger: slog.New(slog.DiscardHandler)}
	if err := syncguard.SetupSchema(ctx, admin, cfg); err != nil {
		panic(err)
	}
	holder, err := syncguard.New(admin, cfg)
	if err != nil {
		panic(err)
	}
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	for i := range n {
		if r, err := holder.Acquire(ctx, fmt.Sprintf("%s:%d", run, i), 10*time.Minute); err != nil || !r.OK {
			panic(err)
		}
	}
	var attempts, errs atomic.Int64
	var bs []*syncguard.Backend
	for range n {
		db, _ := sql.Open("pgx", dsn)
		db.SetMaxOpenConns(2)
		db.SetMaxIdleConns(2)
		b, _ := syncguard.New(db, cfg)
		bs = append(bs, b)
	}
	var wg sync.WaitGroup
	wctx, cancel := context.WithCancel(ctx)
	for i, b := range bs {
		wg.Go(func() {
			_, err := syncguard.Lock(wctx, b, fmt.Sprintf("%s:%d", run, i), &syncguard.LockOptions{TTL: 30 * time.Second,
				Acquisition: syncguard.AcquisitionOptions{Timeout: -1},
				OnAttempt: func(r syncguard.AcquireResult, err error) {
					attempts.Add(1)
					if err != nil {
						errs.Add(1)
					}
				}})
			_ = err
		})
	}
	commits := func() int64 {
		var c int64
		admin.QueryRow(`SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()`).Scan(&c)
		return c
	}
	for s := 0; s < 14; s++ {
		c0, a0 := commits(), attempts.Load()
		time.Sleep(5 * time.Second)
		active := 0
		for _, b := range bs {
			sctx, c := context.WithTimeout(ctx, time.Millisecond)
			if b.NotificationStatus(sctx).Active {
				active++
			}
			c()
		}
		fmt.Printf("t=%ds commits/s %d attempts/s %d errors %d active %d\n", (s+1)*5, (commits()-c0)/5, (attempts.Load()-a0)/5, errs.Load(), active)
	}
	cancel()
	wg.Wait()
}
