package conformance

import (
	"strings"
	"time"

	"github.com/syncguard/syncguard-go/internal/rules"
	"github.com/syncguard/syncguard-go/syncguard"
)

// Identity: a lock's holder identity (Config.Identity, LockOptions.Identity)
// is stored by lockId in <table>_holders, shown by the lookups and List,
// carried by a hand-off, and never shown for a key another implementation
// took over.

func init() {
	registerSQL("Identity/StoredAndShown", func(e *sqlEnv) {
		b := e.newBackend(e.db, func(c *syncguard.Config) { c.Identity = "host-a:101" })
		k := e.key("ident")
		r := e.mustAcquire(b, k, 30*time.Second)
		info, err := e.pb2.LookupKey(e.ctx, k)
		e.must(err, "LookupKey")
		if info == nil || info.Identity != "host-a:101" {
			e.t.Errorf("rule: LookupKey shows the holder's Config.Identity; got %+v", info)
		}
		info, err = e.pb2.LookupID(e.ctx, r.LockID)
		e.must(err, "LookupID")
		if info == nil || info.Identity != "host-a:101" {
			e.t.Errorf("rule: LookupID shows the holder's Config.Identity; got %+v", info)
		}
		list, err := e.pb2.List(e.ctx, &syncguard.ListOptions{Raw: true, Limit: -1})
		e.must(err, "List")
		found := false
		for _, l := range list.Locks {
			if l.LockID == r.LockID {
				found = l.Identity == "host-a:101"
			}
		}
		if !found {
			e.t.Errorf("rule: List shows the holder's identity; got %+v", list.Locks)
		}
		if rel := e.release(b, r.LockID); !rel.OK {
			e.t.Fatalf("release: %+v", rel)
		}
		if n := e.holderRows(k); n != 0 {
			e.t.Errorf("rule: a release deletes its holder's identity row; %d left", n)
		}
		// LockOptions.Identity overrides the Backend's; none at all stores none.
		l, err := syncguard.Lock(e.ctx, b, k, &syncguard.LockOptions{Identity: "job-b"})
		e.must(err, "Lock")
		if info, _ := e.pb.LookupKey(e.ctx, k); info == nil || info.Identity != "job-b" {
			e.t.Errorf("rule: LockOptions.Identity is stored in place of Config.Identity; got %+v", info)
		}
		l.Close()
		// A single attempt (no waiting) carries it too.
		l, err = syncguard.Lock(e.ctx, b, k, &syncguard.LockOptions{Identity: "job-c", Acquisition: syncguard.AcquisitionOptions{MaxRetries: -1}})
		e.must(err, "Lock")
		if info, _ := e.pb.LookupKey(e.ctx, k); info == nil || info.Identity != "job-c" {
			e.t.Errorf("rule: LockOptions.Identity is stored by a single attempt too; got %+v", info)
		}
		l.Close()
		r = e.mustAcquire(e.pb, k, 30*time.Second)
		if info, _ := e.pb2.LookupKey(e.ctx, k); info == nil || info.Identity != "" {
			e.t.Errorf("rule: a holder without an identity shows none; got %+v", info)
		}
		if n := e.holderRows(k); n != 0 {
			e.t.Errorf("rule: an acquire without an identity writes no identity row; %d rows", n)
		}
		e.release(e.pb, r.LockID)
	})

	registerSQL("Identity/TakeoverByReferenceShowsNone", func(e *sqlEnv) {
		b := e.newBackend(e.db, func(c *syncguard.Config) { c.Identity = "host-a:102" })
		k := e.key("ident-ref")
		_, storage, _ := e.derive(k)
		e.mustAcquire(b, k, 30*time.Second)
		// As the reference implementation's upsert takes over a key (an
		// expired row, overwritten in place): a new lock_id, nothing else
		// touched.
		id := rules.GenerateLockID()
		e.exec(`UPDATE `+e.locksTable()+` SET "lock_id" = $2, "fence" = '000000000000099' WHERE "key" = $1`, storage, id)
		info, err := e.pb2.LookupKey(e.ctx, k)
		e.must(err, "LookupKey")
		if info == nil || info.Identity != "" || info.LockIDHash != syncguard.HashKey(id) {
			e.t.Errorf("rule: a key taken over by a process that stores no identity never shows the previous holder's; got %+v", info)
		}
		e.release(e.pb2, id)
		if n := e.holderRows(k); n != 0 {
			e.t.Errorf("rule: a release of a key deletes its earlier holders' identity rows too; %d left", n)
		}
	})

	registerSQL("Identity/HandOffCarriesTheWaitersIdentity", func(e *sqlEnv) {
		b := e.newBackend(e.db, func(c *syncguard.Config) { c.Identity = "holder" })
		k := e.key("ident-handoff")
		r := e.mustAcquire(b, k, 30*time.Second)
		ch := e.lockAsync(e.pb2, k, &syncguard.LockOptions{Identity: "waiter", Acquisition: syncguard.AcquisitionOptions{Timeout: time.Hour}})
		e.awaitQueued(k, 1)
		if rel := e.release(b, r.LockID); !rel.OK {
			e.t.Fatalf("release: %+v", rel)
		}
		l := e.mustGet(ch, r.Fence, "a release hands the key to the queued waiter", e.pb2)
		defer l.Close()
		info, err := e.pb.LookupKey(e.ctx, k)
		e.must(err, "LookupKey")
		if info == nil || info.Identity != "waiter" || info.Fence != l.Fence() {
			e.t.Errorf("rule: a hand-off stores the waiter's identity with the lock it grants; got %+v", info)
		}
	})

	registerSQL("Identity/WithoutHoldersTable", func(e *sqlEnv) {
		base := strings.TrimSuffix(suiteTable("x"), "_x")
		cfg := e.config(base+"_nh", base+"_nhf")
		for _, t := range []string{cfg.TableName, cfg.FenceTableName, cfg.TableName + "_waiters", cfg.TableName + "_holders"} {
			e.dropLater(t)
		}
		e.must(syncguard.SetupSchema(e.ctx, e.db, cfg), "SetupSchema")
		e.exec(`DROP TABLE ` + rules.QuoteIdent(cfg.TableName+"_holders"))
		cfg.Identity = "old-schema"
		b, err := syncguard.New(e.db, cfg)
		e.must(err, "New")
		k := e.key("ident-old")
		r := e.mustAcquire(b, k, 30*time.Second)
		info, err := b.LookupKey(e.ctx, k)
		e.must(err, "LookupKey")
		if info == nil || info.Identity != "" || info.Fence != r.Fence {
			e.t.Errorf("rule: without the holders table locks work and show no identity; got %+v", info)
		}
		if _, err := b.List(e.ctx, nil); err != nil {
			e.t.Errorf("rule: List works without the holders table; got %v", err)
		}
		ch := e.lockAsync(b, k, &syncguard.LockOptions{Acquisition: syncguard.AcquisitionOptions{Timeout: time.Hour}})
		if rel := e.release(b, r.LockID); !rel.OK {
			e.t.Fatalf("rule: a release works without the holders table; got %+v", rel)
		}
		e.mustGet(ch, r.Fence, "waiting works without the holders table").Close()
	})
}

// holderRows counts the identity rows of key.
func (e *sqlEnv) holderRows(key string) int {
	e.t.Helper()
	_, sk, _ := e.derive(key)
	var n int
	e.must(e.db.QueryRowContext(e.ctx, `SELECT count(*) FROM `+rules.QuoteIdent(e.cfg.TableName+"_holders")+` WHERE "key" = $1`, sk).Scan(&n), "counting identity rows")
	return n
}
