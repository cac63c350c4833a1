// Package doctor checks that syncguard can work correctly on a database as
// it is deployed, and says what to fix: the checks of `syncguard doctor`,
// for a smoke test or a health endpoint of your own.
//
//	report, err := doctor.Check(ctx, db, &syncguard.Config{TableName: "app_locks"})
//	if err != nil {
//		return err // the checks could not run
//	}
//	if err := report.Err(); err != nil {
//		return err // a check failed: err names it and what it found
//	}
package doctor

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/syncguard/syncguard-go/internal/deploy"
	"github.com/syncguard/syncguard-go/syncguard"
)

// Report is the result of Check: one Finding per check, in the order the
// checks ran.
type Report struct {
	Findings []Finding
}

// Finding is the outcome of one check of Check (in JSON: check, status,
// detail, fix; what `syncguard doctor --json` prints).
type Finding struct {
	// Check names what was checked: "connection", "lock table", "primary
	// key" (of the lock table), "lock_id index", "expiry index", "lock
	// table privileges", "lock rows", "fence table", "fence primary key",
	// "fence table privileges", "fence counters", "waiters table",
	// "holders table", "synchronous_commit", "fsync", "primary",
	// "replication", "synchronous commit", "clock", "pooler", "prepared
	// statements", "notifications". Later versions may add checks.
	Check string `json:"check"`
	// Status is "ok", "warn" (syncguard works, but something deserves a
	// look) or "fail" (syncguard does not work correctly as deployed).
	Status string `json:"status"`
	// Detail says what was found, in one line.
	Detail string `json:"detail"`
	// Fix says what to do about a warning or failure: SQL to run or a
	// setting to change, possibly several lines. Empty for "ok".
	Fix string `json:"fix,omitempty"`
}

// OK reports whether no check failed (warnings allowed).
func (r Report) OK() bool { return len(r.Failed()) == 0 }

// Failed returns the findings whose Status is "fail".
func (r Report) Failed() []Finding {
	var out []Finding
	for _, f := range r.Findings {
		if f.Status == deploy.Fail {
			out = append(out, f)
		}
	}
	return out
}

// Err returns nil when no check failed, else an Internal *syncguard.Error
// naming each failed check and what it found: a smoke test can simply do
//
//	if err := report.Err(); err != nil { t.Fatal(err) }
func (r Report) Err() error {
	failed := r.Failed()
	if len(failed) == 0 {
		return nil
	}
	parts := make([]string, len(failed))
	for i, f := range failed {
		parts[i] = f.Check + ": " + f.Detail
	}
	return &syncguard.Error{Op: "checkDeployment", Code: syncguard.ErrInternal,
		Msg: fmt.Sprintf("%d deployment checks failed: %s", len(failed), strings.Join(parts, "; "))}
}

// Check checks that syncguard can work correctly on db as it is deployed,
// with the tables cfg names (nil: the defaults), and says what to fix. It
// only reads, unprepared, so it runs as the least-privileged role your
// service uses, in a smoke test or from `syncguard doctor`.
//
// It checks the connection; the tables, their columns, primary keys and
// indexes, exactly as syncguard.SchemaSQL defines them, and the privileges
// the operations need (no DDL); the fence counters and the expired lock
// rows; durability (synchronous_commit, fsync) and replication
// (docs/ha.md); the server's clock against this machine's; a connection
// pooler in between, and whether prepared statements survive it (unless
// cfg.DisablePrepare); and whether waiting is woken on release.
//
// The error, a *syncguard.Error, is non-nil only when the checks could not
// run: bad configuration (InvalidArgument, before any I/O), or a database
// that cannot be reached (the Report then holds the failed "connection"
// finding). Any other problem, a prepared statement lost or clashing
// behind a pooler included (the failed "prepared statements" finding), is
// in the Report: see its Err or OK.
func Check(ctx context.Context, db *sql.DB, cfg *syncguard.Config) (Report, error) {
	findings, err := deploy.Run(ctx, db, cfg)
	var report Report
	for _, f := range findings {
		report.Findings = append(report.Findings, Finding(f))
	}
	return report, err
}
