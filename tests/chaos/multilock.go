package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/syncguard/syncguard-go/internal/rules"
	"github.com/syncguard/syncguard-go/multilock"
	"github.com/syncguard/syncguard-go/syncguard"
	"github.com/syncguard/syncguard-go/tests/pgtest/history"
)

// Several keys at once under the same faults (issue 30): per adapter,
// three workers lock random sets of one to three of four keys, named in
// random order, through multilock.Lock; hold them briefly; release them
// or abandon them (a crash: the set expires). An audit trigger on the
// set lock table records every row change with the server's clock and
// its transaction; after the load the check rebuilds each key's holdings
// on that clock, [written, min(deleted or overwritten, expiry + 1 s
// tolerance)), and requires that no key has two holders at a server time,
// that each key's fences strictly increase, and that every holding's rows
// were all written by one transaction, one per key of its set.

const mlWorkersPerAdapter = 3

// startMultiLock sets up multilock's tables with the audit, starts the
// workers on r.ctx and, when they have stopped, checks the audit
// (r.violate); wg covers all of it.
func (r *runner) startMultiLock(wg *sync.WaitGroup) {
	ctx, cfg := r.ctx, r.cfg
	tb, err := multilock.TablesOf(&cfg)
	fail := func(err error) {
		r.violate(history.Violation{Rule: "the multilock chaos run sets up", Detail: err.Error()})
	}
	if err != nil {
		fail(err)
		return
	}
	audit := rules.QuoteIdent(cfg.TableName + "_ml_audit")
	fn := rules.QuoteIdent(cfg.TableName + "_ml_audit_fn")
	drop := func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = r.admin.ExecContext(cctx, fmt.Sprintf(`DROP TABLE IF EXISTS %s, %s, %s, %s`, rules.QuoteIdent(tb.Locks),
			rules.QuoteIdent(tb.Fences), rules.QuoteIdent(tb.Waiters), audit))
		_, _ = r.admin.ExecContext(cctx, `DROP FUNCTION IF EXISTS `+fn+` CASCADE`)
	}
	if err := multilock.SetupSchema(ctx, r.admin, &cfg); err != nil {
		fail(err)
		return
	}
	const now = `floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint`
	for _, q := range []string{
		`CREATE TABLE ` + audit + ` (id bigserial, at_ms bigint NOT NULL, op text NOT NULL, xid bigint NOT NULL, old_lock_id text, lock_id text, key text, fence text, expires_at_ms bigint, n int)`,
		`CREATE FUNCTION ` + fn + `() RETURNS trigger LANGUAGE plpgsql AS $a$ BEGIN
  IF TG_OP = 'DELETE' THEN
    INSERT INTO ` + audit + ` (at_ms, op, xid, old_lock_id, key) VALUES (` + now + `, 'D', txid_current(), OLD.lock_id, OLD.key);
  ELSIF TG_OP = 'UPDATE' THEN
    INSERT INTO ` + audit + ` (at_ms, op, xid, old_lock_id, lock_id, key, fence, expires_at_ms, n) VALUES (` + now + `, 'U', txid_current(), OLD.lock_id, NEW.lock_id, NEW.key, NEW.fence, NEW.expires_at_ms, NEW.n);
  ELSE
    INSERT INTO ` + audit + ` (at_ms, op, xid, lock_id, key, fence, expires_at_ms, n) VALUES (` + now + `, 'I', txid_current(), NEW.lock_id, NEW.key, NEW.fence, NEW.expires_at_ms, NEW.n);
  END IF;
  RETURN NULL;
END $a$`,
		`CREATE TRIGGER ml_audit AFTER INSERT OR UPDATE OR DELETE ON ` + rules.QuoteIdent(tb.Locks) + ` FOR EACH ROW EXECUTE FUNCTION ` + fn + `()`,
	} {
		if _, err := r.admin.ExecContext(ctx, q); err != nil {
			fail(err)
			drop()
			return
		}
	}
	var workers sync.WaitGroup
	var lockers []*multilock.Locker
	for ai, a := range r.adapt {
		c := cfg
		c.Dialect = nil
		l, err := multilock.New(a.db, &c)
		if err != nil {
			r.opts.Logf("chaos: multilock on %s: %v (skipped)", a.name, err)
			continue
		}
		lockers = append(lockers, l)
		for i := range mlWorkersPerAdapter {
			rng := rand.New(rand.NewPCG(r.opts.Seed, uint64(300+ai*10+i)))
			workers.Add(1)
			go func() { defer workers.Done(); r.mlWorker(ctx, l, rng) }()
		}
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		workers.Wait()
		for _, l := range lockers {
			l.Close()
		}
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		vs, n, err := mlCheckAudit(cctx, r, audit)
		if err != nil {
			fail(err)
		}
		for _, v := range vs {
			r.violate(v)
		}
		r.opts.Logf("chaos: multilock: %d key holdings checked on the server's clock, %d violations", n, len(vs))
		drop()
	}()
}

func (r *runner) mlWorker(ctx context.Context, l *multilock.Locker, rng *rand.Rand) {
	names := []string{"ml-0", "ml-1", "ml-2", "ml-3"}
	for ctx.Err() == nil {
		rng.Shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })
		set := append([]string(nil), names[:1+rng.IntN(3)]...)
		opts := &syncguard.LockOptions{TTL: r.opts.TTL, AutoExtend: rng.IntN(2) == 0,
			Acquisition: syncguard.AcquisitionOptions{Timeout: 3 * time.Second}}
		lease, err := multilock.Lock(ctx, l, set, opts)
		if err != nil {
			time.Sleep(time.Duration(10+rng.IntN(40)) * time.Millisecond)
			continue
		}
		select {
		case <-time.After(time.Duration(rng.IntN(60)) * time.Millisecond):
		case <-ctx.Done():
		}
		if !opts.AutoExtend && rng.IntN(20) == 0 {
			continue // abandoned: it expires at its TTL
		}
		lease.Close()
	}
}

// mlLife is one key's holding by one lockId.
type mlLife struct {
	key, lockID string
	fence       int64
	from, to    int64 // server ms, [from, to)
	exp, ended  int64 // ended: deleted or overwritten (0: never)
}

// mlCheckAudit rebuilds the holdings from the audit and checks them.
func mlCheckAudit(ctx context.Context, r *runner, audit string) ([]history.Violation, int, error) {
	rows, err := r.admin.QueryContext(ctx, `SELECT at_ms, op, xid, COALESCE(old_lock_id, ''), COALESCE(lock_id, ''), key,
		COALESCE(fence, ''), COALESCE(expires_at_ms, 0), COALESCE(n, 0) FROM `+audit+` ORDER BY id`)
	if err != nil {
		return nil, 0, err
	}
	defer rows.Close()
	type holding struct {
		xids map[int64]bool
		n    int
		rows int
	}
	lives := map[[2]string]*mlLife{}
	holdings := map[string]*holding{}
	var order []*mlLife
	var vs []history.Violation
	start := func(at, xid int64, id, key, fence string, exp int64, n int) {
		f, err := rules.ParseFence(fence)
		if err != nil {
			vs = append(vs, history.Violation{Rule: "multilock: fences are 15 digits", Key: key, Detail: fence})
		}
		l := &mlLife{key: key, lockID: id, fence: f, from: at, exp: exp}
		lives[[2]string{id, key}] = l
		order = append(order, l)
		h := holdings[id]
		if h == nil {
			h = &holding{xids: map[int64]bool{}, n: n}
			holdings[id] = h
		}
		h.xids[xid] = true
		h.rows++
	}
	end := func(at int64, id, key string) {
		if l := lives[[2]string{id, key}]; l != nil && l.ended == 0 {
			l.ended = at
		}
	}
	for rows.Next() {
		var (
			at, xid, exp            int64
			op, old, id, key, fence string
			n                       int
		)
		if err := rows.Scan(&at, &op, &xid, &old, &id, &key, &fence, &exp, &n); err != nil {
			return nil, 0, err
		}
		switch {
		case op == "I":
			start(at, xid, id, key, fence, exp, n)
		case op == "U" && old == id:
			if l := lives[[2]string{id, key}]; l != nil {
				l.exp = exp // an extend
			}
		case op == "U":
			end(at, old, key) // an expired row taken over
			start(at, xid, id, key, fence, exp, n)
		case op == "D":
			end(at, old, key)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, 0, err
	}
	for id, h := range holdings {
		if len(h.xids) != 1 || h.rows != h.n {
			vs = append(vs, history.Violation{Rule: "multilock: a holding's keys are all written in one transaction, one row per key of its set",
				Detail: fmt.Sprintf("lockId %s: %d rows for a set of %d, in %d transactions", rules.HashKey(id), h.rows, h.n, len(h.xids))})
		}
	}
	byKey := map[string][]*mlLife{}
	for _, l := range order {
		l.to = l.exp + rules.ToleranceMs
		if l.ended != 0 && l.ended < l.to {
			l.to = l.ended
		}
		byKey[l.key] = append(byKey[l.key], l)
	}
	for key, ls := range byKey {
		for i, a := range ls {
			if i > 0 && a.fence <= ls[i-1].fence {
				vs = append(vs, history.Violation{Rule: "multilock: a key's fences strictly increase", Key: key,
					Detail: fmt.Sprintf("fence %d at %d after %d", a.fence, a.from, ls[i-1].fence)})
			}
			for _, b := range ls[i+1:] {
				if b.from < a.to && a.from < b.to {
					vs = append(vs, history.Violation{Rule: "multilock: no key of a set is held by two holders at a server time", Key: key,
						Detail: fmt.Sprintf("%+v and %+v", *a, *b)})
				}
			}
		}
	}
	return vs, len(order), nil
}
