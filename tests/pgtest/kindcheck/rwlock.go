package kindcheck

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/syncguard/syncguard-go/internal/rules"
	"github.com/syncguard/syncguard-go/rwlock"
	"github.com/syncguard/syncguard-go/tests/pgtest/history"
)

// The read-write lock's audit: a trigger on the holders table records
// every row change with the server's clock; CheckRWLock rebuilds each
// lease's life on that clock, [admitted, min(deleted, expiry + 1 s
// tolerance)).

// RWLockAudit returns the quoted names of the read-write lock audit's
// table and trigger function for the lock table table.
func RWLockAudit(table string) (audit, fn string) {
	return rules.QuoteIdent(table + "_rw_audit"), rules.QuoteIdent(table + "_rw_audit_fn")
}

// InstallRWLockAudit adds the audit to the read-write lock's holders
// table of lock table table (rwlock.SetupSchema first). Safe to re-run.
func InstallRWLockAudit(ctx context.Context, db *sql.DB, table string) error {
	audit, fn := RWLockAudit(table)
	holders, _, _ := rwlock.Tables(table)
	for _, q := range []string{
		`CREATE TABLE IF NOT EXISTS ` + audit + ` (id bigserial, at_ms bigint NOT NULL, op text NOT NULL, lock_id text, key text, exclusive boolean, fence bigint, expires_at_ms bigint)`,
		`CREATE OR REPLACE FUNCTION ` + fn + `() RETURNS trigger LANGUAGE plpgsql AS $a$ BEGIN
  IF TG_OP = 'DELETE' THEN
    INSERT INTO ` + audit + ` (at_ms, op, lock_id, key, exclusive, fence, expires_at_ms) VALUES (floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint, 'D', OLD.lock_id, OLD.key, OLD.exclusive, OLD.fence, OLD.expires_at_ms);
  ELSE
    INSERT INTO ` + audit + ` (at_ms, op, lock_id, key, exclusive, fence, expires_at_ms) VALUES (floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint, left(TG_OP, 1), NEW.lock_id, NEW.key, NEW.exclusive, NEW.fence, NEW.expires_at_ms);
  END IF;
  RETURN NULL;
END $a$`,
		`DROP TRIGGER IF EXISTS rw_audit ON ` + rules.QuoteIdent(holders),
		`CREATE TRIGGER rw_audit AFTER INSERT OR UPDATE OR DELETE ON ` + rules.QuoteIdent(holders) + ` FOR EACH ROW EXECUTE FUNCTION ` + fn + `()`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			return err
		}
	}
	return nil
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

// CheckRWLock rebuilds the leases of lock table table from the audit and
// checks them: no writer's lease overlaps any other lease of its key,
// writer fences strictly increase, and a reader's fence is the latest
// writer fence at its admission. It returns the leases checked.
func CheckRWLock(ctx context.Context, db *sql.DB, table string) ([]history.Violation, int, error) {
	audit, _ := RWLockAudit(table)
	rows, err := db.QueryContext(ctx, `SELECT at_ms, op, lock_id, key, exclusive, fence, expires_at_ms FROM `+audit+` ORDER BY id`)
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
					vs = append(vs, history.Violation{Rule: RuleRWFences, Key: key,
						Detail: fmt.Sprintf("fence %d admitted at %d after %d", a.fence, a.from, last)})
				}
				last = a.fence
			} else if a.fence != last {
				vs = append(vs, history.Violation{Rule: RuleRWReader, Key: key,
					Detail: fmt.Sprintf("reader fence %d at %d, latest writer fence %d", a.fence, a.from, last)})
			}
			for _, b := range ls[i+1:] {
				if b.from >= a.to || a.from >= b.to {
					continue
				}
				if a.exclusive || b.exclusive {
					vs = append(vs, history.Violation{Rule: RuleRWWriter, Key: key,
						Detail: fmt.Sprintf("%+v and %+v", *a, *b)})
				}
			}
		}
	}
	return vs, len(order), nil
}
