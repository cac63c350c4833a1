package syncguard

import (
	"context"
	"database/sql"
	"log/slog"

	"github.com/syncguard/syncguard-go/internal/waiting"
)

// checkNotifications is CheckDeployment's "notifications" check: whether
// Lock and WithLock calls of configuration cfg on db that wait for a
// contended key are woken the moment a release hands them the key. It asks
// a Backend of that configuration, as a program would. status is "ok" or
// "warn".
func checkNotifications(ctx context.Context, db *sql.DB, cfg resolved) (status, detail, fix string) {
	cfg.logger = slog.New(slog.DiscardHandler) // the finding says it
	s := newShared(db, cfg)
	b := &Backend{shared: s}
	defer b.Close()
	st := b.NotificationStatus(ctx)
	if st.Active {
		return "ok", "a LISTEN connection receives the hand-off notifications: a waiting Lock/WithLock call attempts the moment a release hands it the key", ""
	}
	fix = "waiting still works, and keeps its order (the queue is in the tables), but a waiter finds the key handed to it at its next attempt (at most a second later) instead of at once"
	switch st.kind {
	case waiting.KindNoListener:
		fix = `import an adapter (_ "github.com/syncguard/syncguard-go/pgxstd" or .../pq), and with lib/pq open the pool with the pq adapter's connector or set Config.Dialect to pq.ListenDialect(dsn); ` + fix
	case waiting.KindProbeLost:
		fix = "a pooler in transaction mode does not forward notifications: point the processes that wait for locks at PostgreSQL directly or at a session-mode pool; " + fix
	}
	return "warn", "waiting falls back to polling: " + st.Reason, fix
}
