package syncguard

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"strings"

	"github.com/syncguard/syncguard-go/driver"
	"github.com/syncguard/syncguard-go/internal/deploy"
	"github.com/syncguard/syncguard-go/internal/waiting"
)

// Report is the result of CheckDeployment: one Finding per check, in the
// order the checks ran.
type Report struct {
	Findings []Finding
}

// Finding is the outcome of one check of CheckDeployment (in JSON:
// check, status, detail, fix; what `syncguard doctor --json` prints).
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

// Err returns nil when no check failed, else an Internal *Error naming
// each failed check and what it found: a smoke test can simply do
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
	return &Error{Op: "checkDeployment", Code: ErrInternal,
		Msg: fmt.Sprintf("%d deployment checks failed: %s", len(failed), strings.Join(parts, "; "))}
}

// CheckDeployment checks that syncguard can work correctly on db as it is
// deployed, with the tables cfg names (nil: the defaults), and says what to
// fix. It only reads, unprepared, so it runs as the least-privileged role
// your service uses, in a smoke test or from `syncguard doctor`.
//
// It checks the connection; the tables, their columns, primary keys and
// indexes, exactly as SchemaSQL defines them, and the privileges the
// operations need (no DDL); the fence counters and the expired lock rows;
// durability (synchronous_commit, fsync) and replication (docs/ha.md); the
// server's clock against this machine's; a connection pooler in between,
// and whether prepared statements survive it (unless cfg.DisablePrepare);
// and whether waiting is woken on release.
//
// The error is non-nil only when the checks could not run: bad
// configuration (InvalidArgument, before any I/O), or a database that
// cannot be reached (the Report then holds the failed "connection"
// finding). Any other problem, a prepared statement lost or clashing
// behind a pooler included (the failed "prepared statements" finding), is
// in the Report: see its Err or OK.
func CheckDeployment(ctx context.Context, db *sql.DB, cfg *Config) (Report, error) {
	const op = "checkDeployment"
	r, err := cfg.resolve()
	if err != nil {
		err.(*Error).Op = op
		return Report{}, err
	}
	if db == nil {
		return Report{}, invalidArg(op, "db must not be nil")
	}
	if e := ctxErr(ctx, op); e != nil {
		return Report{}, e
	}
	if r.Dialect == nil {
		r.Dialect, _ = driver.Lookup(db.Driver())
	}
	r.Logger = slog.New(slog.DiscardHandler) // the findings say it
	b := &Backend{shared: newShared(db, r)}
	defer b.Close()
	findings, err := deploy.Check(ctx, deploy.Target{
		DB: db, Dialect: r.Dialect, OneShot: b.shared.oneShotArgs,
		Names:         schemaNames(r.TableName, r.FenceTableName),
		Schema:        render("schema.sql", r.TableName, r.FenceTableName),
		NoPrepare:     r.DisablePrepare,
		Funcs:         funcSigs(b.shared.sql.fns),
		Notifications: b.notificationFinding,
	})
	var report Report
	for _, f := range findings {
		report.Findings = append(report.Findings, Finding(f))
	}
	if err != nil {
		return report, classifier{dialect: r.Dialect}.wrap(ctx, op, err)
	}
	if e := ctxErr(ctx, op); e != nil {
		return report, e
	}
	return report, nil
}

// notificationFinding is CheckDeployment's "notifications" check, asked of
// b as a program would.
func (b *Backend) notificationFinding(ctx context.Context) (status, detail, fix string) {
	st := b.NotificationStatus(ctx)
	via := map[bool]string{false: "the pool", true: "Config.NotifyDB"}[b.shared.cfg.NotifyDB != nil]
	if st.Active {
		return "ok", "a LISTEN connection on " + via + " receives the hand-off notifications: a waiting Lock/WithLock call attempts the moment a release hands it the key", ""
	}
	fix = "waiting still works, and keeps its order (the queue is in the tables), but a waiter finds the key handed to it at its next attempt instead of at once"
	switch st.kind {
	case waiting.KindNoListener:
		fix = `import an adapter (_ "github.com/syncguard/syncguard-go/pgxstd" or .../pq), and with lib/pq open the pool with the pq adapter's connector or set Config.Dialect to pq.ListenDialect(dsn); ` + fix
	case waiting.KindProbeLost:
		fix = "a pooler in transaction mode does not forward notifications: set Config.NotifyDB (syncguard doctor: SYNCGUARD_NOTIFY_DSN) to a pool that reaches PostgreSQL directly or through a session-mode pool; " + fix
	}
	return "warn", "waiting falls back to polling: " + st.Reason, fix
}
