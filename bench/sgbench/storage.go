package sgbench

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"time"

	"github.com/syncguard/syncguard-go/internal/rules"
	"github.com/syncguard/syncguard-go/syncguard"
)

// StorageResult is the on-disk cost of live locks: one JSON line.
type StorageResult struct {
	Bench    string `json:"bench"`
	Driver   string `json:"driver"`
	Workload string `json:"workload"`
	Locks    int    `json:"locks"`
	KeyBytes int    `json:"key_bytes"`
	// Lock table, after Locks acquires through syncguard (real lockIds,
	// real fences, random lock_id order in its unique index).
	HeapBytes       int64            `json:"heap_bytes"`
	TableBytes      int64            `json:"table_bytes"` // heap + TOAST + FSM/VM
	IndexBytes      map[string]int64 `json:"index_bytes"`
	TotalBytes      int64            `json:"total_bytes"` // pg_total_relation_size
	BytesPerLock    float64          `json:"bytes_per_lock"`
	AvgRowBytes     float64          `json:"avg_row_bytes"` // pg_column_size of the row
	FenceTotalBytes int64            `json:"fence_total_bytes"`
	BytesPerFence   float64          `json:"bytes_per_fence_counter"`
	FenceIndexBytes int64            `json:"fence_index_bytes"`
	LoadSeconds     float64          `json:"load_seconds"`
	Targets         []Target         `json:"targets"`
}

// StorageKeyFormat is the shape of the keys stored: 30 bytes, a realistic
// "resource:tenant:id" key.
const StorageKeyFormat = "bench:tenant-%02d:order-%08d"

// Storage acquires n live locks (each on its own key, so n fence counters
// too) through syncguard in batches inside transactions (Backend.WithTx, on
// a fresh Backend whose statements are not prepared yet, with every pooled
// connection inside a transaction: the case that used to deadlock), then
// reads the relation sizes. The tables are dropped afterwards.
func Storage(ctx context.Context, driverName string, db *sql.DB, n, workers int) (*StorageResult, error) {
	if err := DropTables(ctx, db, StoreTable, StoreFenceTable); err != nil {
		return nil, err
	}
	defer DropTables(context.WithoutCancel(ctx), db, StoreTable, StoreFenceTable) //nolint:errcheck
	cfg := &syncguard.Config{TableName: StoreTable, FenceTableName: StoreFenceTable}
	if err := syncguard.SetupSchema(ctx, db, cfg); err != nil {
		return nil, err
	}
	b, err := syncguard.New(db, cfg)
	if err != nil {
		return nil, err
	}
	const batch = 2000
	start := time.Now()
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	next := make(chan int)
	go func() {
		defer close(next)
		for i := 0; i < n; i += batch {
			select {
			case next <- i:
			case <-ctx.Done():
				return
			}
		}
	}()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for lo := range next {
				err := func() error {
					tx, err := db.BeginTx(ctx, nil)
					if err != nil {
						return err
					}
					defer tx.Rollback() //nolint:errcheck
					tb := b.WithTx(tx)
					for i := lo; i < min(lo+batch, n); i++ {
						r, err := tb.Acquire(ctx, fmt.Sprintf(StorageKeyFormat, i%50, i), time.Hour)
						if err != nil {
							return err
						}
						if !r.OK {
							return fmt.Errorf("storage: key %d not acquired", i)
						}
					}
					return tx.Commit()
				}()
				if err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	res := &StorageResult{Bench: "syncguard", Driver: driverName, Workload: "storage", Locks: n,
		KeyBytes: len(fmt.Sprintf(StorageKeyFormat, 0, 0)), IndexBytes: map[string]int64{}, LoadSeconds: time.Since(start).Seconds()}
	var count int64
	if err := db.QueryRowContext(ctx, `SELECT count(*), avg(pg_column_size(l.*)) FROM `+rules.QuoteIdent(StoreTable)+` l`).Scan(&count, &res.AvgRowBytes); err != nil {
		return nil, err
	}
	if count != int64(n) {
		return nil, fmt.Errorf("storage: %d rows, want %d", count, n)
	}
	q := `SELECT pg_relation_size($1::regclass), pg_table_size($1::regclass), pg_total_relation_size($1::regclass)`
	if err := db.QueryRowContext(ctx, q, rules.QuoteIdent(StoreTable)).Scan(&res.HeapBytes, &res.TableBytes, &res.TotalBytes); err != nil {
		return nil, err
	}
	var fheap, ftable int64
	if err := db.QueryRowContext(ctx, q, rules.QuoteIdent(StoreFenceTable)).Scan(&fheap, &ftable, &res.FenceTotalBytes); err != nil {
		return nil, err
	}
	res.FenceIndexBytes = res.FenceTotalBytes - ftable
	rows, err := db.QueryContext(ctx, `SELECT indexrelid::regclass::text, pg_relation_size(indexrelid) FROM pg_index WHERE indrelid = $1::regclass ORDER BY 1`, rules.QuoteIdent(StoreTable))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		var size int64
		if err := rows.Scan(&name, &size); err != nil {
			return nil, err
		}
		res.IndexBytes[name] = size
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	res.BytesPerLock = float64(res.TotalBytes) / float64(n)
	res.BytesPerFence = float64(res.FenceTotalBytes) / float64(n)
	res.Targets = []Target{{Name: "bytes per active lock (table + all indexes)", Value: res.BytesPerLock, Goal: "< 1024", Met: res.BytesPerLock < 1024}}
	return res, nil
}
