package syncguard

import (
	"context"
	"database/sql"
	"log/slog"

	"github.com/syncguard/syncguard-go/driver"
	"github.com/syncguard/syncguard-go/internal/deploy"
	"github.com/syncguard/syncguard-go/internal/waiting"
)

func init() {
	deploy.Run = func(ctx context.Context, db *sql.DB, cfg any) ([]deploy.Finding, error) {
		c, _ := cfg.(*Config)
		return checkDeployment(ctx, db, c)
	}
}

// checkDeployment is doctor.Check (see it): it resolves cfg, runs the
// checks of internal/deploy on db and classifies their error.
func checkDeployment(ctx context.Context, db *sql.DB, cfg *Config) ([]deploy.Finding, error) {
	const op = "checkDeployment"
	r, err := cfg.resolve()
	if err != nil {
		err.(*Error).Op = op
		return nil, err
	}
	if db == nil {
		return nil, invalidArg(op, "db must not be nil")
	}
	if e := ctxErr(ctx, op); e != nil {
		return nil, e
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
	if err != nil {
		return findings, classifier{dialect: r.Dialect}.wrap(ctx, op, err)
	}
	if e := ctxErr(ctx, op); e != nil {
		return findings, e
	}
	return findings, nil
}

// notificationFinding is doctor.Check's "notifications" check, asked of
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
