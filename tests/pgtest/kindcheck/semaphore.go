package kindcheck

import (
	"context"
	"database/sql"
	"fmt"
	"sort"

	"github.com/syncguard/syncguard-go/internal/rules"
	"github.com/syncguard/syncguard-go/semaphore"
	"github.com/syncguard/syncguard-go/tests/pgtest/history"
)

// The semaphore's audit: a trigger on the slots table records every
// holding of a slot that ends (its lock_id replaced or cleared), on the
// server's clock: [acquired, min(next acquire, expiry + 1 s tolerance)).

const semAuditSQL = `CREATE TABLE IF NOT EXISTS %[1]s (slot int, lock_id text, fence bigint, acquired_at_ms bigint, ended_at_ms bigint);
CREATE OR REPLACE FUNCTION %[2]s() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF OLD.lock_id IS NOT NULL AND NEW.lock_id IS DISTINCT FROM OLD.lock_id THEN
    INSERT INTO %[1]s VALUES (OLD.slot, OLD.lock_id, OLD.fence, OLD.acquired_at_ms, LEAST(NEW.acquired_at_ms, OLD.expires_at_ms + 1000));
  END IF;
  RETURN NEW;
END $$;
DROP TRIGGER IF EXISTS sem_audit ON %[3]s;
CREATE TRIGGER sem_audit AFTER UPDATE ON %[3]s FOR EACH ROW EXECUTE FUNCTION %[2]s()`

// SemaphoreAudit is the quoted name of the semaphore audit's table for
// the lock table table (syncguard.Config.TableName).
func SemaphoreAudit(table string) string { return rules.QuoteIdent(table + "_sem_audit") }

// InstallSemaphoreAudit adds the audit to the semaphore's slots table of
// lock table table (semaphore.SetupSchema first). Safe to re-run.
func InstallSemaphoreAudit(ctx context.Context, db *sql.DB, table string) error {
	_, slots, _ := semaphore.Tables(table)
	_, err := db.ExecContext(ctx, fmt.Sprintf(semAuditSQL, SemaphoreAudit(table), rules.QuoteIdent(table+"_sem_audit_fn"), rules.QuoteIdent(slots)))
	return err
}

// SemResult is what CheckSemaphore saw.
type SemResult struct {
	Holdings int   // ended holdings checked
	Slots    int   // slots used
	Peak     int64 // most live holders at one server time
}

// CheckSemaphore judges the ended holdings of a semaphore of permits,
// used on one key, on the server's clock: one holder per slot at a time,
// fences strictly increasing per slot, at most permits live holders.
func CheckSemaphore(ctx context.Context, db *sql.DB, table string, permits int) (SemResult, []history.Violation, error) {
	var res SemResult
	rows, err := db.QueryContext(ctx, `SELECT slot, fence, acquired_at_ms, ended_at_ms FROM `+SemaphoreAudit(table)+` ORDER BY slot, acquired_at_ms, fence`)
	if err != nil {
		return res, nil, err
	}
	defer rows.Close()
	type holding struct{ slot, fence, start, end int64 }
	bySlot := map[int64][]holding{}
	type ev struct{ at, d int64 }
	var evs []ev
	for rows.Next() {
		var h holding
		if err := rows.Scan(&h.slot, &h.fence, &h.start, &h.end); err != nil {
			return res, nil, err
		}
		res.Holdings++
		bySlot[h.slot] = append(bySlot[h.slot], h)
		evs = append(evs, ev{h.start, 1}, ev{h.end, -1})
	}
	if err := rows.Err(); err != nil {
		return res, nil, err
	}
	var vs []history.Violation
	for slot, list := range bySlot {
		for i := 1; i < len(list); i++ {
			prev, h := list[i-1], list[i]
			if h.start < prev.end {
				vs = append(vs, history.Violation{Rule: RuleSemSlot,
					Detail: fmt.Sprintf("slot %d fence %d from %d, the previous holder's until %d", slot, h.fence, h.start, prev.end)})
			}
			if h.fence <= prev.fence {
				vs = append(vs, history.Violation{Rule: RuleSemFences,
					Detail: fmt.Sprintf("slot %d fence %d after %d", slot, h.fence, prev.fence)})
			}
		}
	}
	sort.Slice(evs, func(i, j int) bool { return evs[i].at < evs[j].at || evs[i].at == evs[j].at && evs[i].d < evs[j].d })
	var live int64
	for _, e := range evs {
		live += e.d
		res.Peak = max(res.Peak, live)
	}
	res.Slots = len(bySlot)
	if res.Peak > int64(permits) || res.Slots > permits {
		vs = append(vs, history.Violation{Rule: RuleSemPermits,
			Detail: fmt.Sprintf("%d permits: peak %d, %d slots", permits, res.Peak, res.Slots)})
	}
	return res, vs, nil
}
