package kindcheck

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/syncguard/syncguard-go/internal/rules"
	"github.com/syncguard/syncguard-go/multilock"
	"github.com/syncguard/syncguard-go/syncguard"
	"github.com/syncguard/syncguard-go/tests/pgtest/history"
)

// The set lock's audit: a trigger on multilock's lock table records every
// row change with the server's clock and its transaction; CheckMultiLock
// rebuilds each key's holdings on that clock, [written, min(deleted or
// overwritten, expiry + 1 s tolerance)).

// MultiLockAudit returns the quoted names of the set lock audit's table
// and trigger function for the lock table table.
func MultiLockAudit(table string) (audit, fn string) {
	return rules.QuoteIdent(table + "_ml_audit"), rules.QuoteIdent(table + "_ml_audit_fn")
}

// InstallMultiLockAudit adds the audit to multilock's lock table of cfg
// (multilock.SetupSchema first). Safe to re-run.
func InstallMultiLockAudit(ctx context.Context, db *sql.DB, cfg *syncguard.Config) error {
	tb, err := multilock.TablesOf(cfg)
	if err != nil {
		return err
	}
	audit, fn := MultiLockAudit(cfg.TableName)
	const now = `floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint`
	for _, q := range []string{
		`CREATE TABLE IF NOT EXISTS ` + audit + ` (id bigserial, at_ms bigint NOT NULL, op text NOT NULL, xid bigint NOT NULL, old_lock_id text, lock_id text, key text, fence text, expires_at_ms bigint, n int)`,
		`CREATE OR REPLACE FUNCTION ` + fn + `() RETURNS trigger LANGUAGE plpgsql AS $a$ BEGIN
  IF TG_OP = 'DELETE' THEN
    INSERT INTO ` + audit + ` (at_ms, op, xid, old_lock_id, key) VALUES (` + now + `, 'D', txid_current(), OLD.lock_id, OLD.key);
  ELSIF TG_OP = 'UPDATE' THEN
    INSERT INTO ` + audit + ` (at_ms, op, xid, old_lock_id, lock_id, key, fence, expires_at_ms, n) VALUES (` + now + `, 'U', txid_current(), OLD.lock_id, NEW.lock_id, NEW.key, NEW.fence, NEW.expires_at_ms, NEW.n);
  ELSE
    INSERT INTO ` + audit + ` (at_ms, op, xid, lock_id, key, fence, expires_at_ms, n) VALUES (` + now + `, 'I', txid_current(), NEW.lock_id, NEW.key, NEW.fence, NEW.expires_at_ms, NEW.n);
  END IF;
  RETURN NULL;
END $a$`,
		`DROP TRIGGER IF EXISTS ml_audit ON ` + rules.QuoteIdent(tb.Locks),
		`CREATE TRIGGER ml_audit AFTER INSERT OR UPDATE OR DELETE ON ` + rules.QuoteIdent(tb.Locks) + ` FOR EACH ROW EXECUTE FUNCTION ` + fn + `()`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			return err
		}
	}
	return nil
}

// mlLife is one key's holding by one lockId.
type mlLife struct {
	key, lockID string
	fence       int64
	from, to    int64 // server ms, [from, to)
	exp, ended  int64 // ended: deleted or overwritten (0: never)
}

// CheckMultiLock rebuilds the holdings of lock table table from the audit
// and checks them: no key has two holders at a server time, each key's
// fences strictly increase, and every holding's rows were all written by
// one transaction, one per key of its set (a lockId that holds again after
// all its rows ended is a new holding). It returns the key holdings
// checked.
func CheckMultiLock(ctx context.Context, db *sql.DB, table string) ([]history.Violation, int, error) {
	audit, _ := MultiLockAudit(table)
	rows, err := db.QueryContext(ctx, `SELECT at_ms, op, xid, COALESCE(old_lock_id, ''), COALESCE(lock_id, ''), key,
		COALESCE(fence, ''), COALESCE(expires_at_ms, 0), COALESCE(n, 0) FROM `+audit+` ORDER BY id`)
	if err != nil {
		return nil, 0, err
	}
	defer rows.Close()
	type holding struct {
		id         string
		xids       map[int64]bool
		n          int
		rows, live int
	}
	lives := map[[2]string]*mlLife{}
	holdings := map[string]*holding{} // lockId -> its current holding
	var all []*holding
	var order []*mlLife
	var vs []history.Violation
	start := func(at, xid int64, id, key, fence string, exp int64, n int) {
		f, err := rules.ParseFence(fence)
		if err != nil {
			vs = append(vs, history.Violation{Rule: RuleMLDigits, Key: key, Detail: fence})
		}
		l := &mlLife{key: key, lockID: id, fence: f, from: at, exp: exp}
		lives[[2]string{id, key}] = l
		order = append(order, l)
		// A lockId whose rows have all ended and that writes rows again
		// is a new holding: an attempt of unknown outcome that committed
		// after the caller's clean-up released the earlier one.
		h := holdings[id]
		if h == nil || h.live == 0 {
			h = &holding{id: id, xids: map[int64]bool{}, n: n}
			holdings[id] = h
			all = append(all, h)
		}
		h.xids[xid] = true
		h.rows++
		h.live++
	}
	end := func(at int64, id, key string) {
		if l := lives[[2]string{id, key}]; l != nil && l.ended == 0 {
			l.ended = at
			if h := holdings[id]; h != nil {
				h.live--
			}
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
	for _, h := range all {
		if len(h.xids) != 1 || h.rows != h.n {
			vs = append(vs, history.Violation{Rule: RuleMLOneTx,
				Detail: fmt.Sprintf("lockId %s: %d rows for a set of %d, in %d transactions", rules.HashKey(h.id), h.rows, h.n, len(h.xids))})
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
				vs = append(vs, history.Violation{Rule: RuleMLFences, Key: key,
					Detail: fmt.Sprintf("fence %d at %d after %d", a.fence, a.from, ls[i-1].fence)})
			}
			for _, b := range ls[i+1:] {
				if b.from < a.to && a.from < b.to {
					vs = append(vs, history.Violation{Rule: RuleMLOverlap, Key: key,
						Detail: fmt.Sprintf("%+v and %+v", *a, *b)})
				}
			}
		}
	}
	return vs, len(order), nil
}
