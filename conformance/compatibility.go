package conformance

import (
	"database/sql"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/syncguard/syncguard-go/internal/rules"
	"github.com/syncguard/syncguard-go/syncguard"
)

// Compatibility: the tables are shared with the reference TypeScript
// implementation, so rows must be laid out and derived exactly as it does,
// and rows it writes must be honoured.

func init() {
	registerSQL("Compatibility/RowsMatchReferenceLayout", func(e *sqlEnv) {
		const ttl = 30 * time.Second
		k := e.key("Cafe\u0301/compat")
		norm, storage, fenceKey := e.derive(k)
		r := e.mustAcquire(e.b, k, ttl)
		row, ok := e.rawLockRow(k)
		if !ok {
			e.t.Fatalf("rule: the lock row's key is StorageKeys(NFC key); no row with key %q", storage)
		}
		want := rawLock{Key: storage, LockID: r.LockID, Fence: string(r.Fence), UserKey: norm, ExpiresAt: ms(r.ExpiresAt), AcquiredAt: ms(r.ExpiresAt) - ttlMs(ttl)}
		if row != want {
			e.t.Errorf("rule: the lock row is (key=storage key, lock_id, expires_at_ms, acquired_at_ms = expires - ttl, fence = 15-digit text, user_key = NFC key); got %+v, want %+v", row, want)
		}
		var (
			fk       string
			fence    int64
			keyDebug sql.NullString
		)
		err := e.db.QueryRowContext(e.ctx, `SELECT "fence_key", "fence", "key_debug" FROM `+e.fencesTable()).Scan(&fk, &fence, &keyDebug)
		e.must(err, "reading the only fence row")
		if fk != fenceKey || fence != fenceNum(e.t, r.Fence) || keyDebug.String != norm {
			e.t.Errorf(`rule: the fence row is (fence_key = StorageKeys' fence key "fence:"+storage key, fence = the last fence as bigint, key_debug = NFC key); got (%q, %d, %q), want (%q, %d, %q)`,
				fk, fence, keyDebug.String, fenceKey, fenceNum(e.t, r.Fence), norm)
		}
		if fenceKey != "fence:"+storage {
			e.t.Errorf("rule: below 1700 bytes the fence key is \"fence:\" + storage key; got %q for %q", fenceKey, storage)
		}
	})

	registerSQL("Compatibility/ReferenceWrittenRowIsHonoured", func(e *sqlEnv) {
		k := e.key("fromnode")
		norm, storage, fenceKey := e.derive(k)
		id := rules.GenerateLockID()
		// As the reference implementation writes an acquire (fence 7).
		e.exec(`INSERT INTO `+e.fencesTable()+` ("fence_key", "fence", "key_debug") VALUES ($1, 7, $2)`, fenceKey, norm)
		e.exec(`INSERT INTO `+e.locksTable()+` ("key", "lock_id", "expires_at_ms", "acquired_at_ms", "fence", "user_key")
SELECT $1, $2, n + 30000, n, '000000000000007', $3 FROM (SELECT `+rules.NowMsSQL+` AS n) AS t`, storage, id, norm)
		if !e.isLocked(e.b, k) {
			e.t.Errorf("rule: a lock written by the reference implementation is seen by IsLocked; got false")
		}
		info, err := e.b2.LookupKey(e.ctx, k)
		e.must(err, "LookupKey")
		if info == nil || info.Fence != "000000000000007" || info.KeyHash != syncguard.HashKey(norm) || info.LockIDHash != syncguard.HashKey(id) {
			e.t.Errorf("rule: LookupKey reads a reference-written lock (fence 7, hashes of key and lockId); got %+v", info)
		}
		if c := e.acquire(e.b2, k, time.Second); c.OK || c.Reason != syncguard.ReasonLocked {
			e.t.Errorf("rule: a reference-written live lock excludes acquirers; got %+v", c)
		}
		if x := e.extend(e.b, id, 10*time.Second); !x.OK {
			e.t.Errorf("rule: a reference-written lock can be extended by its lockId; got %+v", x)
		}
		if rel := e.release(e.b, id); !rel.OK {
			e.t.Errorf("rule: a reference-written lock can be released by its lockId; got %+v", rel)
		}
		r := e.mustAcquire(e.b2, k, 30*time.Second)
		if r.Fence != "000000000000008" {
			e.t.Errorf("rule: the fence counter is shared with the reference implementation; after its fence 7 got %s", r.Fence)
		}
		e.release(e.b2, r.LockID)
	})

	registerSQL("Compatibility/AdvisoryLockSharedWithReference", func(e *sqlEnv) {
		// The reference acquire serializes on pg_advisory_xact_lock(hashtext(
		// storage key)). One in flight must exclude a Go acquire, and a Go
		// acquire in flight must hold that advisory lock.
		k := e.key("advisory")
		norm, storage, fenceKey := e.derive(k)
		id := rules.GenerateLockID()
		ref := e.begin(e.db2)
		e.txExec(ref, `SELECT pg_advisory_xact_lock(hashtext($1))`, storage)
		e.txExec(ref, `INSERT INTO `+e.fencesTable()+` ("fence_key", "fence", "key_debug") VALUES ($1, 0, $2) ON CONFLICT ("fence_key") DO NOTHING`, fenceKey, norm)
		var fence int64
		if err := ref.QueryRowContext(e.ctx, `UPDATE `+e.fencesTable()+` SET "fence" = "fence" + 1 WHERE "fence_key" = $1 RETURNING "fence"`, fenceKey).Scan(&fence); err != nil {
			e.t.Fatalf("setup: reference fence increment: %v", err)
		}
		e.txExec(ref, `INSERT INTO `+e.locksTable()+` ("key", "lock_id", "expires_at_ms", "acquired_at_ms", "fence", "user_key")
SELECT $1, $2, n + 30000, n, `+rules.FenceTextSQL("$3::bigint")+`, $4 FROM (SELECT `+rules.NowMsSQL+` AS n) AS t`, storage, id, fence, norm)
		got, err := e.acquireWhileOpen(ref, e.b, k)
		if err != nil || got.OK || got.Reason != syncguard.ReasonLocked {
			e.t.Errorf("rule: an acquire by the reference implementation in flight excludes a Go acquire of the same key; got %+v, %v", got, err)
		}
		if info, _ := e.b.LookupKey(e.ctx, k); info == nil || info.LockIDHash != syncguard.HashKey(id) {
			e.t.Errorf("rule: the reference implementation's committed lock is the only holder; lookup %+v", info)
		}
		e.release(e.b, id)

		tx := e.begin(e.db)
		if r, err := e.pb.WithTx(tx).Acquire(e.ctx, k, 30*time.Second); err != nil || !r.OK {
			e.t.Fatalf("rule: acquire inside a transaction works like outside; got %+v, %v", r, err)
		}
		probe := e.begin(e.db2)
		var free bool
		if err := probe.QueryRowContext(e.ctx, `SELECT pg_try_advisory_xact_lock(hashtext($1))`, storage).Scan(&free); err != nil {
			e.t.Fatalf("setup: probing the advisory lock: %v", err)
		}
		_ = probe.Rollback()
		if free {
			e.t.Errorf("rule: an acquire in flight holds pg_advisory_xact_lock(hashtext(storage key)) until its transaction ends, as the reference implementation expects; it was free")
		}
		_ = tx.Rollback()
	})

	registerSQL("Compatibility/ReferenceInFlightOnAnExpiredRow", func(e *sqlEnv) {
		// A reference acquire that holds the advisory lock and has read
		// the key's expired row FOR UPDATE, but not yet written: a Go
		// acquire reports "locked" at once, neither waiting for that row
		// (and deadlocking on the counter row) nor taking it over.
		k := e.key("ref-expired")
		_, storage, _ := e.derive(k)
		old := e.mustAcquire(e.pb, k, 30*time.Second)
		if _, err := e.db.ExecContext(e.ctx, `UPDATE `+e.locksTable()+` SET "expires_at_ms" = "expires_at_ms" - 120000 WHERE "lock_id" = $1`, old.LockID); err != nil {
			e.t.Fatalf("setup: expiring the lock: %v", err)
		}
		ref := e.begin(e.db2)
		e.txExec(ref, `SELECT pg_advisory_xact_lock(hashtext($1))`, storage)
		e.txExec(ref, `SELECT 1 FROM `+e.locksTable()+` WHERE "key" = $1 FOR UPDATE`, storage)
		got, err := e.acquireWhileOpen(ref, e.b, k)
		if err != nil || got.OK || got.Reason != syncguard.ReasonLocked {
			e.t.Errorf("rule: a reference acquire in flight (advisory lock held, row read FOR UPDATE) excludes a Go acquire of the same key; got %+v, %v", got, err)
		}
	})

	registerSQL("Compatibility/SchemaMatchesSpec", func(e *sqlEnv) {
		type col struct{ name, typ, nullable, def string }
		cols := func(table string) []col {
			rows, err := e.db.QueryContext(e.ctx, `SELECT column_name, data_type, is_nullable, coalesce(column_default, '')
FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = $1 ORDER BY ordinal_position`, table)
			e.must(err, "reading information_schema.columns")
			defer rows.Close()
			var out []col
			for rows.Next() {
				var c col
				e.must(rows.Scan(&c.name, &c.typ, &c.nullable, &c.def), "scanning columns")
				out = append(out, c)
			}
			return out
		}
		wantLocks := []col{{"key", "text", "NO", ""}, {"lock_id", "text", "NO", ""}, {"expires_at_ms", "bigint", "NO", ""},
			{"acquired_at_ms", "bigint", "NO", ""}, {"fence", "text", "NO", ""}, {"user_key", "text", "NO", ""}}
		wantFences := []col{{"fence_key", "text", "NO", ""}, {"fence", "bigint", "NO", "0"}, {"key_debug", "text", "YES", ""}}
		if got := cols(e.cfg.TableName); !slices.Equal(got, wantLocks) {
			e.t.Errorf("rule: the lock table has the spec's columns and types; got %v, want %v", got, wantLocks)
		}
		if got := cols(e.cfg.FenceTableName); !slices.Equal(got, wantFences) {
			e.t.Errorf("rule: the fence table has the spec's columns and types (plus the reference's key_debug); got %v, want %v", got, wantFences)
		}
		pk := func(table string) string {
			var c string
			err := e.db.QueryRowContext(e.ctx, `SELECT string_agg(a.attname, ',')
FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey)
WHERE i.indrelid = to_regclass(quote_ident($1)) AND i.indisprimary`, table).Scan(&c)
			e.must(err, "reading the primary key")
			return c
		}
		if got := pk(e.cfg.TableName); got != "key" {
			e.t.Errorf("rule: the lock table's primary key is (key); got (%s)", got)
		}
		if got := pk(e.cfg.FenceTableName); got != "fence_key" {
			e.t.Errorf("rule: the fence table's primary key is (fence_key); got (%s)", got)
		}
		rows, err := e.db.QueryContext(e.ctx, `SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = current_schema() AND tablename = $1`, e.cfg.TableName)
		e.must(err, "reading pg_indexes")
		defer rows.Close()
		idx := map[string]string{}
		for rows.Next() {
			var n, d string
			e.must(rows.Scan(&n, &d), "scanning pg_indexes")
			idx[n] = d
		}
		for name, want := range map[string][]string{
			"idx_" + e.cfg.TableName + "_lock_id": {"CREATE UNIQUE INDEX", "USING btree (lock_id)"},
			"idx_" + e.cfg.TableName + "_expires": {"CREATE INDEX", "USING btree (expires_at_ms)"},
		} {
			def, ok := idx[name]
			for _, w := range want {
				if !ok || !strings.Contains(def, w) {
					e.t.Errorf("rule: the lock table has index %s (%s); got %q (present %v)", name, strings.Join(want, ", "), def, ok)
					break
				}
			}
		}
	})

	registerSQL("Compatibility/SetupSchemaIdempotentAndConcurrent", func(e *sqlEnv) {
		base := strings.TrimSuffix(suiteTable("x"), "_x")
		cfg := e.config(base+"_setup", base+"_setupf")
		e.t.Cleanup(func() {
			for _, tbl := range []string{cfg.TableName, cfg.FenceTableName} {
				_, _ = e.db.Exec(`DROP TABLE IF EXISTS ` + rules.QuoteIdent(tbl))
			}
		})
		var wg sync.WaitGroup
		for i := 0; i < 4; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				db := e.db
				if i%2 == 1 {
					db = e.db2
				}
				if err := syncguard.SetupSchema(e.ctx, db, cfg); err != nil {
					e.t.Errorf("rule: SetupSchema is safe to run concurrently; got %v", err)
				}
			}()
		}
		wg.Wait()
		e.must(syncguard.SetupSchema(e.ctx, e.db, cfg), "SetupSchema on an existing schema")
		b, err := syncguard.New(e.db, cfg)
		e.must(err, "New")
		if r, err := b.Acquire(e.ctx, e.key("setup"), time.Second); err != nil || !r.OK {
			e.t.Errorf("rule: the schema SetupSchema creates works; acquire got %+v, %v", r, err)
		}
		ddl, err := syncguard.SchemaSQL(cfg)
		e.must(err, "SchemaSQL")
		if !strings.Contains(ddl, rules.QuoteIdent(cfg.TableName)) || !strings.Contains(ddl, rules.QuoteIdent(cfg.FenceTableName)) {
			e.t.Errorf("rule: SchemaSQL renders the configured table names; got %s", ddl)
		}
	})
}
