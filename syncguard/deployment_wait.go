package syncguard

import (
	"context"
	"database/sql"
	"log/slog"
	"strings"
)

// checkNotifications is CheckDeployment's "notifications" check: whether
// Lock and WithLock calls of configuration cfg on db that wait for a
// contended key are woken on release. It opens a LISTEN connection through
// the dialect, as a waiting Backend does, and waits for a probe
// notification to come back through it. status is "ok" or "warn".
func checkNotifications(ctx context.Context, db *sql.DB, cfg resolved, cl classifier) (status, detail, fix string) {
	if cfg.dialect == nil {
		return "warn", "no syncguard dialect for this driver, so no LISTEN connection: waiting Lock/WithLock calls poll",
			`import an adapter (_ "github.com/syncguard/syncguard-go/pgxstd" or .../pq) or set Config.Dialect`
	}
	cfg.logger = slog.New(slog.DiscardHandler) // the finding says it
	h := newHub(db, cfg, cl)
	ctx, cancel := context.WithTimeout(ctx, listenOpenTimeout+2*listenProbeTimeout)
	st := h.status(ctx, true)
	cancel()
	h.close()
	if st.Active {
		return "ok", "a LISTEN connection receives the lock table's notifications: waiting Lock/WithLock calls are woken the moment a key is released, and queue in arrival order across processes", ""
	}
	fix = "waiting still works, by polling: a release by another process is found by the next retry (AcquisitionOptions) or at the holder's expiry, so hand-offs are slower and not in arrival order across processes"
	switch {
	case strings.Contains(st.Reason, "driver.Listener") && strings.Contains(st.Reason, "lib/pq"):
		fix = "set Config.Dialect to pq.ListenDialect(dsn) (lib/pq needs the DSN to open its LISTEN connection); " + fix
	case strings.Contains(st.Reason, "probe"):
		fix = "a pooler in transaction mode does not forward notifications: point the processes that wait for locks at PostgreSQL directly or at a session-mode pool; " + fix
	}
	return "warn", "waiting falls back to polling: " + st.Reason, fix
}
