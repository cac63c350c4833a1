package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/syncguard/syncguard-go/internal/rules"
	"github.com/syncguard/syncguard-go/rwlock"
	"github.com/syncguard/syncguard-go/syncguard"
	"github.com/syncguard/syncguard-go/tests/pgtest/history"
)

// The read-write lock under the same faults (issue 30): per adapter, four
// workers take shared or exclusive leases (one in five exclusive) of two
// keys through syncguard.Lock, hold them briefly, release them or abandon
// them (a crash: the lease expires). An audit trigger on the leases table
// records every row change with the server's clock; after the load the
// check rebuilds each lease's life on that clock, [admitted, min(deleted,
// expiry + 1 s tolerance)), and requires that no writer's lease overlaps
// any other lease of its key, that writer fences strictly increase, and
// that a reader's fence is the latest writer fence at its admission.

const rwWorkersPerAdapter = 4

// startRWLock sets up the read-write lock tables of the run, starts its
// workers on r.ctx and, when they have stopped, checks the audit and
// reports violations (r.violate); wg covers all of it.
func (r *runner) startRWLock(wg *sync.WaitGroup) {
	ctx := r.ctx
	cfg := r.cfg
	table := cfg.TableName + "_rw"
	audit := rules.QuoteIdent(cfg.TableName + "_rw_audit")
	fn := rules.QuoteIdent(cfg.TableName + "_rw_audit_fn")
	drop := func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = r.admin.ExecContext(cctx, fmt.Sprintf(`DROP TABLE IF EXISTS %s, %s, %s, %s`, rules.QuoteIdent(table), audit,
			rules.QuoteIdent(cfg.TableName+"_rw_keys"), rules.QuoteIdent(cfg.TableName+"_rw_waiters")))
		for _, f := range []string{"_rw_acquire", "_rw_release", "_rw_grant", "_rw_hint", "_rw_lock", "_rw_audit_fn"} {
			_, _ = r.admin.ExecContext(cctx, `DROP FUNCTION IF EXISTS `+rules.QuoteIdent(cfg.TableName+f)+` CASCADE`)
		}
	}
	fail := func(err error) {
		r.violate(history.Violation{Rule: "the read-write lock's chaos run sets up", Detail: err.Error()})
	}
	if err := rwlock.SetupSchema(ctx, r.admin, &cfg); err != nil {
		fail(err)
		return
	}
	for _, q := range []string{
		`CREATE TABLE ` + audit + ` (id bigserial, at_ms bigint NOT NULL, op text NOT NULL, lock_id text, key text, exclusive boolean, fence bigint, expires_at_ms bigint)`,
		`CREATE FUNCTION ` + fn + `() RETURNS trigger LANGUAGE plpgsql AS $a$ BEGIN
  IF TG_OP = 'DELETE' THEN
    INSERT INTO ` + audit + ` (at_ms, op, lock_id, key, exclusive, fence, expires_at_ms) VALUES (floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint, 'D', OLD.lock_id, OLD.key, OLD.exclusive, OLD.fence, OLD.expires_at_ms);
  ELSE
    INSERT INTO ` + audit + ` (at_ms, op, lock_id, key, exclusive, fence, expires_at_ms) VALUES (floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint, left(TG_OP, 1), NEW.lock_id, NEW.key, NEW.exclusive, NEW.fence, NEW.expires_at_ms);
  END IF;
  RETURN NULL;
END $a$`,
		`CREATE TRIGGER rw_audit AFTER INSERT OR UPDATE OR DELETE ON ` + rules.QuoteIdent(table) + ` FOR EACH ROW EXECUTE FUNCTION ` + fn + `()`,
	} {
		if _, err := r.admin.ExecContext(ctx, q); err != nil {
			fail(err)
			drop()
			return
		}
	}
	var workers sync.WaitGroup
	var locks []*rwlock.RWLock
	for ai, a := range r.adapt {
		c := cfg
		c.Dialect = nil
		rw, err := rwlock.New(a.db, &c)
		if err != nil {
			r.opts.Logf("chaos: rwlock on %s: %v (skipped)", a.name, err)
			continue
		}
		locks = append(locks, rw)
		for i := range rwWorkersPerAdapter {
			rng := rand.New(rand.NewPCG(r.opts.Seed, uint64(100+ai*10+i)))
			workers.Add(1)
			go func() { defer workers.Done(); r.rwWorker(ctx, rw, rng) }()
		}
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		workers.Wait()
		for _, rw := range locks {
			rw.Close()
		}
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		vs, n, err := rwCheckAudit(cctx, r, audit)
		if err != nil {
			fail(err)
		}
		for _, v := range vs {
			r.violate(v)
		}
		r.opts.Logf("chaos: rwlock: %d leases checked on the server's clock, %d violations", n, len(vs))
		drop()
	}()
}

func (r *runner) rwWorker(ctx context.Context, rw *rwlock.RWLock, rng *rand.Rand) {
	for ctx.Err() == nil {
		excl := rng.IntN(5) == 0
		side := rw.Shared()
		if excl {
			side = rw.Exclusive()
		}
		key := fmt.Sprintf("rw-%d", rng.IntN(2))
		opts := &syncguard.LockOptions{TTL: r.opts.TTL, AutoExtend: rng.IntN(2) == 0,
			Acquisition: syncguard.AcquisitionOptions{Timeout: 3 * time.Second}}
		l, err := syncguard.Lock(ctx, side, key, opts)
		if err != nil {
			time.Sleep(time.Duration(10+rng.IntN(40)) * time.Millisecond)
			continue
		}
		select {
		case <-time.After(time.Duration(rng.IntN(80)) * time.Millisecond):
		case <-ctx.Done():
		}
		if !opts.AutoExtend && rng.IntN(20) == 0 {
			continue // abandoned: it expires at its TTL
		}
		l.Close()
	}
}

type rwLife struct {
	key       string
	lockID    string
	exclusive bool
	fence     int64
	from, to  int64 // server ms, [from, to)
	exp       int64
	deleted   int64 // 0: never
}

// rwCheckAudit rebuilds the leases from the audit and checks them.
func rwCheckAudit(ctx context.Context, r *runner, audit string) ([]history.Violation, int, error) {
	rows, err := r.admin.QueryContext(ctx, `SELECT at_ms, op, lock_id, key, exclusive, fence, expires_at_ms FROM `+audit+` ORDER BY id`)
	if err != nil {
		return nil, 0, err
	}
	defer rows.Close()
	lives := map[string]*rwLife{}
	var order []*rwLife
	for rows.Next() {
		var (
			at, fence, exp int64
			op, id, key    string
			excl           bool
		)
		if err := rows.Scan(&at, &op, &id, &key, &excl, &fence, &exp); err != nil {
			return nil, 0, err
		}
		l := lives[id]
		switch op {
		case "I":
			l = &rwLife{key: key, lockID: id, exclusive: excl, fence: fence, from: at, exp: exp}
			lives[id] = l
			order = append(order, l)
		case "U":
			if l != nil {
				l.exp = exp
			}
		case "D":
			if l != nil && l.deleted == 0 {
				l.deleted = at
			}
		}
	}
	if err := rows.Err(); err != nil {
		return nil, 0, err
	}
	byKey := map[string][]*rwLife{}
	for _, l := range order {
		l.to = l.exp + rules.ToleranceMs
		if l.deleted != 0 && l.deleted < l.to {
			l.to = l.deleted
		}
		byKey[l.key] = append(byKey[l.key], l)
	}
	var vs []history.Violation
	for key, ls := range byKey {
		last := int64(0)
		for i, a := range ls {
			if a.exclusive {
				if a.fence <= last {
					vs = append(vs, history.Violation{Rule: "rwlock: writer fences strictly increase per key", Key: key,
						Detail: fmt.Sprintf("fence %d admitted at %d after %d", a.fence, a.from, last)})
				}
				last = a.fence
			} else if a.fence != last {
				vs = append(vs, history.Violation{Rule: "rwlock: a reader's fence is the latest writer fence at its admission", Key: key,
					Detail: fmt.Sprintf("reader fence %d at %d, latest writer fence %d", a.fence, a.from, last)})
			}
			for _, b := range ls[i+1:] {
				if b.from >= a.to || a.from >= b.to {
					continue
				}
				if a.exclusive || b.exclusive {
					vs = append(vs, history.Violation{Rule: "rwlock: a writer's lease overlaps no other lease (server clock)", Key: key,
						Detail: fmt.Sprintf("%+v and %+v", *a, *b)})
				}
			}
		}
	}
	return vs, len(order), nil
}
