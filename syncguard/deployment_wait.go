package syncguard

import (
	"context"
	"log/slog"
	"strings"
)

// notifications checks whether Lock and WithLock calls of this
// configuration that wait for a contended key are woken on release: it
// opens a LISTEN connection through the dialect, as a waiting Backend does,
// and waits for a probe notification to come back through it.
func (d *deployment) notifications() {
	const check = "notifications"
	if d.cfg.dialect == nil {
		d.add(check, statusWarn, "no syncguard dialect for this driver, so no LISTEN connection: waiting Lock/WithLock calls poll",
			`import an adapter (_ "github.com/syncguard/syncguard-go/pgxstd" or .../pq) or set Config.Dialect`)
		return
	}
	cfg := d.cfg
	cfg.logger = slog.New(slog.DiscardHandler) // the finding says it
	s := &shared{db: d.db, cfg: cfg, cl: d.cl}
	s.hub = newHub(s)
	ctx, cancel := context.WithTimeout(d.ctx, listenOpenTimeout+2*listenProbeTimeout)
	st := s.hub.status(ctx, true)
	cancel()
	s.hub.close()
	if st.Active {
		d.add(check, statusOK, "a LISTEN connection receives the lock table's notifications: waiting Lock/WithLock calls are woken the moment a key is released, and queue in arrival order across processes", "")
		return
	}
	fix := "waiting still works, by polling: a release by another process is found by the next retry (AcquisitionOptions) or at the holder's expiry, so hand-offs are slower and not in arrival order across processes"
	switch {
	case strings.Contains(st.Reason, "driver.Listener") && strings.Contains(st.Reason, "lib/pq"):
		fix = "set Config.Dialect to pq.ListenDialect(dsn) (lib/pq needs the DSN to open its LISTEN connection); " + fix
	case strings.Contains(st.Reason, "probe"):
		fix = "a pooler in transaction mode does not forward notifications: point the processes that wait for locks at PostgreSQL directly or at a session-mode pool; " + fix
	}
	d.add(check, statusWarn, "waiting falls back to polling: "+st.Reason, fix)
}
