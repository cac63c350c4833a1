// Package kindcheck judges the lock kinds (semaphore, rwlock, multilock)
// and txguard-checked writes under faults, for the fault-injection runs
// (tests/chaos: server crashes and broken connections; tests/ha:
// failovers), so that both check the same rules the same way.
//
// Two sources of evidence: audits, triggers that record every change of a
// kind's table on the server's clock in the changing transaction (a change
// and its audit row commit, or vanish in a crash or failover, together),
// checked after the load (mutual exclusion, at most N holders, fences
// strictly increasing, all-or-nothing sets); and the clients' own record
// of what they were acknowledged (Acks), which sees what a failover lost
// from the audit too: an acknowledged acquire that was lost shows as a
// fence handed out again, or a fence after the failover not above one
// acknowledged before it. TxTable is a resource table written under
// txguard's lease check; a write it commits from a lost lease is a zombie
// write.
package kindcheck

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"strings"
)

// Rule names, by kind: every Violation of this package has one of them.
const (
	RuleSemSlot     = "semaphore: one holder per slot at a time (server clock)"
	RuleSemFences   = "semaphore: per-permit fences strictly increase"
	RuleSemPermits  = "semaphore: at most the permits live holders by the server's clock"
	RuleSemResource = "semaphore: the per-slot fenced resource never rejects a write made in belief"

	RuleRWFences = "rwlock: writer fences strictly increase per key"
	RuleRWReader = "rwlock: a reader's fence is the latest writer fence at its admission"
	RuleRWWriter = "rwlock: a writer's lease overlaps no other lease (server clock)"

	RuleMLDigits  = "multilock: fences are 15 digits"
	RuleMLOneTx   = "multilock: a holding's keys are all written in one transaction, one row per key of its set"
	RuleMLFences  = "multilock: a key's fences strictly increase"
	RuleMLOverlap = "multilock: no key of a set is held by two holders at a server time"

	RuleTxLease  = "txguard: a write commits only while its lease holds (no zombie write)"
	RuleTxKept   = "txguard: every committed write is still there after the failovers"
	RuleAckTwice = "an acknowledged fence is never handed out again (per key or slot)"
	RuleAckAfter = "a fence acquired after a crash or failover exceeds every fence acknowledged before it (per key or slot)"
)

// Kinds are the kinds this package judges, in report order.
var Kinds = []string{"semaphore", "rwlock", "multilock", "txguard"}

// Rules returns the rules checked for kind, in report order (the client
// record's rules, reported per kind, last).
func Rules(kind string) []string {
	var rs []string
	switch kind {
	case "semaphore":
		rs = []string{RuleSemSlot, RuleSemFences, RuleSemPermits}
	case "rwlock":
		rs = []string{RuleRWFences, RuleRWReader, RuleRWWriter}
	case "multilock":
		rs = []string{RuleMLDigits, RuleMLOneTx, RuleMLFences, RuleMLOverlap}
	case "txguard":
		rs = []string{RuleTxLease, RuleTxKept}
	}
	return append(rs, kind+": "+RuleAckTwice, kind+": "+RuleAckAfter)
}

// Dump writes every row of table (a quoted name) to w, one line a row,
// for a counterexample's evidence.
func Dump(ctx context.Context, db *sql.DB, table string, w io.Writer) error {
	rows, err := db.QueryContext(ctx, `SELECT * FROM `+table)
	if err != nil {
		return err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "== %s (%s)\n", table, strings.Join(cols, ", "))
	vals := make([]any, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	for rows.Next() {
		if err := rows.Scan(ptrs...); err != nil {
			return err
		}
		parts := make([]string, len(vals))
		for i, v := range vals {
			if b, ok := v.([]byte); ok {
				v = string(b)
			}
			parts[i] = fmt.Sprint(v)
		}
		fmt.Fprintln(w, strings.Join(parts, "\t"))
	}
	return rows.Err()
}
