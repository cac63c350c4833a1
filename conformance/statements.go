package conformance

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/syncguard/syncguard-go/internal/rules"
	"github.com/syncguard/syncguard-go/syncguard"
)

// Every operation keeps working however the pool's connections reach the
// server. Behind a pooler in transaction mode (PgBouncer) one client
// connection's statements run on different server connections, where a
// statement prepared elsewhere is missing (26000), already exists (42P05)
// or is another client's statement of the same name: a Backend must notice
// and go on with statements that need nothing prepared, without failing an
// operation on the way.
func init() {
	registerSQL("Statements/EveryOperationOnManyConnections", func(e *sqlEnv) {
		const workers, rounds = 8, 15
		pool := func(w int) syncguard.LockBackend {
			if w%2 == 1 {
				return e.pb2
			}
			return e.pb
		}
		failures := e.ownKeys(workers, rounds, 8, "stmts", pool, func(b syncguard.LockBackend, k string, fail func(string, ...any)) {
			r, err := b.Acquire(e.ctx, k, 30*time.Second)
			if err != nil || !r.OK {
				fail("acquire of its own free key: %+v, %v", r, err)
				return
			}
			if x, err := b.Extend(e.ctx, r.LockID, time.Minute); err != nil || !x.OK {
				fail("extend of its live lock: %+v, %v", x, err)
			}
			if locked, err := b.IsLocked(e.ctx, k); err != nil || !locked {
				fail("IsLocked of its held key: %v, %v", locked, err)
			}
			if info, err := b.LookupKey(e.ctx, k); err != nil || info == nil || info.Fence != r.Fence {
				fail("LookupKey of its held key: %+v, %v", info, err)
			}
			if info, err := b.LookupID(e.ctx, r.LockID); err != nil || info == nil || info.Fence != r.Fence {
				fail("LookupID of its lock: %+v, %v", info, err)
			}
			if rel, err := b.Release(e.ctx, r.LockID); err != nil || !rel.OK {
				fail("release of its lock: %+v, %v", rel, err)
			}
		})
		if failures.any() {
			e.t.Errorf("rule: every operation works on every connection of the pool, whatever routes them to the server; %d workers on 2 pools saw:\n  %s",
				workers, failures)
		}
		// And inside transactions, which a transaction-mode pooler keeps on
		// one server connection.
		for i := range 3 {
			tx := e.begin(e.db)
			k := e.key(fmt.Sprintf("stmtstx%d", i))
			r, err := e.pb.WithTx(tx).Acquire(e.ctx, k, 30*time.Second)
			if err != nil || !r.OK {
				e.t.Errorf("rule: acquire inside a transaction works on every connection; got %+v, %v", r, err)
				continue
			}
			if err := tx.Commit(); err != nil {
				e.t.Fatalf("setup: commit: %v", err)
			}
			if rel := e.release(e.pb2, r.LockID); !rel.OK {
				e.t.Errorf("rule: a committed transactional lock is released from any pool; got %+v", rel)
			}
		}
	})
}

func init() {
	// A statement the session lost (a pooler ran the next use on another
	// server connection, or DEALLOCATE ALL ran there) is run again
	// unprepared and the Backend goes on unprepared on that very
	// connection: the unprepared text must not be one the driver still
	// maps to the lost statement (pgx's database/sql driver runs any query
	// whose text was prepared on the connection as that statement).
	registerSQL("Statements/LostPreparedStatementDoesNotStick", func(e *sqlEnv) {
		e.needSessionState("DEALLOCATE ALL must reach the session that prepared the statements")
		if e.cfg.DisablePrepare {
			e.t.Skip("the harness's Config turns prepared statements off (DisablePrepare)")
		}
		db := e.h.Open(e.t)
		db.SetMaxOpenConns(1) // one connection: the one that prepared
		b := e.newBackend(db, nil)
		k := e.key("lost")
		r := e.mustAcquire(b, k, 30*time.Second) // prepares acquire on the connection
		if rel := e.release(b, r.LockID); !rel.OK {
			e.t.Fatalf("setup: release: %+v", rel)
		}
		if _, err := db.ExecContext(e.ctx, "DEALLOCATE ALL"); err != nil {
			e.t.Fatalf("setup: DEALLOCATE ALL: %v", err)
		}
		for round := range 3 {
			r, err := b.Acquire(e.ctx, k, 30*time.Second)
			if err != nil || !r.OK {
				e.t.Fatalf("rule: after the session lost a prepared statement, operations go on unprepared on the same connection; round %d acquire of a free key: %+v, %v", round, r, err)
			}
			if rel, err := b.Release(e.ctx, r.LockID); err != nil || !rel.OK {
				e.t.Fatalf("rule: after the session lost a prepared statement, operations go on unprepared on the same connection; round %d release: %+v, %v", round, rel, err)
			}
		}
	})
}

func init() {
	// Unprepared statements (Config.DisablePrepare, or after a pooler was
	// detected) carry the same values as prepared ones: some drivers send
	// them as literals, which must survive any character a key may hold.
	registerSQL("Statements/UnpreparedKeepsEveryCharacter", func(e *sqlEnv) {
		for _, prepare := range []bool{true, false} {
			b := e.newBackend(e.db, func(c *syncguard.Config) { c.DisablePrepare = c.DisablePrepare || !prepare })
			for _, raw := range []string{`it's`, `back\slash`, `\'`, `''`, `E'x'`, `$1`, `$$x$$`, `a;--b`, "tab\tnew\nline", `"quoted"`, "ünïcödé ✓ 🔒"} {
				k := e.key("") + raw
				r, err := b.Acquire(e.ctx, k, 30*time.Second)
				if err != nil || !r.OK {
					e.t.Errorf("rule: any valid key can be acquired (prepared %v); key %q: %+v, %v", prepare, k, r, err)
					continue
				}
				want, _, _ := e.derive(k)
				d, err := b.LookupKeyDebug(e.ctx, k)
				if err != nil || d == nil || d.Key != want || d.LockID != r.LockID {
					e.t.Errorf("rule: a key reaches the server unchanged (prepared %v); stored %+v for %q, %v", prepare, d, want, err)
				}
				e.release(b, r.LockID)
			}
		}
	})
}

func init() {
	// A release on the pool is its own transaction, and its commit does
	// not wait for the WAL flush when the lock had at most a minute left: a
	// release lost in a crash leaves the lock held until its TTL, which is
	// safe, and the next acquire's commit flushes it anyway. Inside the caller's transaction (WithTx) the
	// commit is the caller's, and its durability is left alone. An AFTER
	// DELETE trigger on the case's lock table records the setting the
	// releasing transaction runs with.
	registerSQL("Statements/ReleaseSkipsOnlyItsOwnFlush", func(e *sqlEnv) {
		seen, fn := suiteTable("sc"), suiteTable("scfn")
		e.exec(`CREATE TABLE ` + rules.QuoteIdent(seen) + ` ("sc" text NOT NULL)`)
		e.dropLater(seen)
		e.exec(`CREATE FUNCTION ` + rules.QuoteIdent(fn) + `() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN INSERT INTO ` +
			rules.QuoteIdent(seen) + ` VALUES (current_setting('synchronous_commit')); RETURN NULL; END $$`)
		e.t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, _ = e.db.ExecContext(ctx, `DROP FUNCTION IF EXISTS `+rules.QuoteIdent(fn)+` CASCADE`)
		})
		e.exec(`CREATE TRIGGER "sc" AFTER DELETE ON ` + e.locksTable() + ` FOR EACH ROW EXECUTE FUNCTION ` + rules.QuoteIdent(fn) + `()`)
		var role string
		e.must(e.db.QueryRowContext(e.ctx, `SELECT current_setting('synchronous_commit')`).Scan(&role), "reading synchronous_commit")
		if role == "off" {
			e.t.Skip("the role's synchronous_commit is off: every commit skips the flush (doctor.Check fails that setting)")
		}
		last := func() string {
			var sc string
			e.must(e.db.QueryRowContext(e.ctx, `SELECT "sc" FROM `+rules.QuoteIdent(seen)+` ORDER BY ctid DESC LIMIT 1`).Scan(&sc), "reading the recorded setting")
			return sc
		}

		r := e.mustAcquire(e.pb, e.key("sc"), 30*time.Second)
		if rel := e.release(e.pb, r.LockID); !rel.OK {
			e.t.Fatalf("setup: release: %+v", rel)
		}
		if sc := last(); sc != "off" {
			e.t.Errorf("rule: a release on the pool commits without waiting for the WAL flush (synchronous_commit off for its own transaction); it ran with %q", sc)
		}
		// A lock with long to live keeps a durable release: a crash must not
		// bring it back for that long.
		r = e.mustAcquire(e.pb, e.key("sclong"), 5*time.Minute)
		if rel := e.release(e.pb, r.LockID); !rel.OK {
			e.t.Fatalf("setup: release: %+v", rel)
		}
		if sc := last(); sc != role {
			e.t.Errorf("rule: the release of a lock with more than a minute to live waits for the flush (synchronous_commit %q); it ran with %q", role, sc)
		}

		tx := e.begin(e.db)
		defer func() { _ = tx.Rollback() }()
		r2, err := e.pb.WithTx(tx).Acquire(e.ctx, e.key("sctx"), 30*time.Second)
		if err != nil || !r2.OK {
			e.t.Fatalf("setup: acquire in a transaction: %+v, %v", r2, err)
		}
		if rel, err := e.pb.WithTx(tx).Release(e.ctx, r2.LockID); err != nil || !rel.OK {
			e.t.Fatalf("setup: release in a transaction: %+v, %v", rel, err)
		}
		var inTx, recorded string
		e.must(tx.QueryRowContext(e.ctx, `SELECT current_setting('synchronous_commit')`).Scan(&inTx), "reading synchronous_commit in the transaction")
		e.must(tx.QueryRowContext(e.ctx, `SELECT "sc" FROM `+rules.QuoteIdent(seen)+` ORDER BY ctid DESC LIMIT 1`).Scan(&recorded), "reading the recorded setting in the transaction")
		if inTx != role || recorded != role {
			e.t.Errorf("rule: a release inside the caller's transaction leaves that transaction's durability alone (synchronous_commit %q); after it the transaction has %q, the release ran with %q", role, inTx, recorded)
		}
	})
}

func init() {
	// A Backend with prepared statements off (Config.DisablePrepare, or
	// switched off behind a pooler) leaves nothing prepared on its pool's
	// connections: not its operations, nor the notifications and the probe
	// of its waiting (a driver's statement cache, such as pgx's default,
	// would prepare those, which a transaction-mode pooler cannot route).
	registerSQL("Statements/NothingPreparedWhenOff", func(e *sqlEnv) {
		e.needSessionState("pg_prepared_statements is per server session")
		db := e.h.Open(e.t)
		db.SetMaxOpenConns(2) // the LISTEN connection may take one while waiting
		b := e.newBackend(db, func(c *syncguard.Config) { c.DisablePrepare = true })
		k := e.key("noprep")
		held := e.mustAcquire(e.pb, k, 60*time.Second)
		ch := e.lockAsync(b, k, polling()) // waits: LISTEN, probe, q, then a
		e.pause(300 * time.Millisecond)
		if r := e.release(e.pb, held.LockID); !r.OK {
			e.t.Fatalf("setup: release: %+v", r)
		}
		lease := e.mustGet(ch, held.Fence, "the waiter gets the key after the release", b)
		if x, err := lease.Extend(e.ctx, 30*time.Second); err != nil || !x.OK {
			e.t.Fatalf("setup: extend: %+v, %v", x, err)
		}
		if _, err := b.LookupKey(e.ctx, k); err != nil {
			e.t.Fatalf("setup: LookupKey: %v", err)
		}
		lease.Close()
		e.must(b.Close(), "Backend.Close")
		var conns []*sql.Conn // every connection of the pool, held at once
		for range 2 {
			c, err := db.Conn(e.ctx)
			e.must(err, "taking a connection")
			defer c.Close()
			conns = append(conns, c)
		}
		for i, c := range conns {
			var n int
			var stmts sql.NullString
			e.must(c.QueryRowContext(e.ctx, `SELECT count(*), string_agg(left("statement", 60), ' | ') FROM pg_prepared_statements
WHERE "statement" NOT LIKE '%pg_prepared_statements%'`).Scan(&n, &stmts), "reading pg_prepared_statements")
			if n != 0 {
				e.t.Errorf("rule: with prepared statements off nothing is prepared on the pool's connections; connection %d has %d: %s", i, n, stmts.String)
			}
		}
	})
}
