package syncguard

import (
	"context"
	"fmt"
	"log/slog"
	"time"
)

// The LISTEN connection of a hub (see wake.go): at most one per Backend,
// opened when the first waiter waits, through the dialect's
// driver.Listener capability, confirmed by a probe notification sent
// through the pool, pinged when quiet, and closed after listenIdle without
// waiters. A failure (no capability, a pooler that does not forward
// notifications, a broken connection) is logged once per Backend, and
// waiting falls back to polling until a later waiter tries again, no
// sooner than listenRetryMin after the failure (doubling up to
// listenRetryMax).

// Tunables of the LISTEN connection. Variables, so that tests can shorten
// them.
var (
	listenOpenTimeout  = 10 * time.Second // opening the LISTEN connection
	listenProbeTimeout = 3 * time.Second  // the probe's round trip through it
	listenIdle         = 30 * time.Second // close it after this long without waiters
	listenQuiet        = 10 * time.Second // ping it after this long without a notification
	listenRetryMin     = 5 * time.Second  // first retry after a failure, doubling
	listenRetryMax     = 5 * time.Minute
)

// Listener states.
const (
	lnOff      = iota // no LISTEN connection (none yet, idle-closed, or failed)
	lnStarting        // opening it
	lnProbing         // listening; the probe has not come back yet
	lnOn              // confirmed
)

// ensureListenerLocked starts the LISTEN connection if waiting needs one
// and none is open or being opened.
func (h *hub) ensureListenerLocked() {
	if h.lst == nil {
		h.logFallbackLocked()
		return
	}
	if h.state != lnOff || time.Now().Before(h.retryAt) {
		return
	}
	h.state = lnStarting
	h.settled = make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	h.stopListener, h.listenerDone = cancel, make(chan struct{})
	go func() {
		defer close(h.listenerDone)
		h.runListener(ctx)
	}()
}

func (h *hub) logFallbackLocked() {
	if h.logged {
		return
	}
	h.logged = true
	h.s.cfg.logger.Warn("syncguard: waiting for contended locks falls back to polling; releases by other processes are found by retries and expiry, not at once",
		slog.String("table", h.s.cfg.table), slog.String("reason", h.reason))
}

// setState moves the listener to state; reason explains lnOff after a
// failure ("" for an idle close).
func (h *hub) setState(state int, reason string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	old := h.state
	h.state = state
	if (state == lnOn || state == lnOff) && (old == lnStarting || old == lnProbing) {
		close(h.settled)
	}
	switch state {
	case lnOn:
		h.retryWait = listenRetryMin
		h.reason = ""
		// Waiters may queue now: let them.
		for _, kq := range h.keys {
			for _, w := range kq.waiters {
				select {
				case w.nudge <- struct{}{}:
				default:
				}
			}
		}
	case lnOff:
		if reason != "" { // a failure, not an idle close
			h.reason = reason
			h.retryAt = time.Now().Add(h.retryWait)
			h.retryWait = min(2*h.retryWait, listenRetryMax)
			h.logFallbackLocked()
		} else {
			h.reason = "the LISTEN connection was closed (idle for " + listenIdle.String() + ", or Backend.Close)"
		}
		// Events may have been missed, and the queue is no longer shared.
		h.resyncLocked(true)
	}
}

// runListener owns the LISTEN connection from opening to closing, which
// happens after listenIdle without waiters, on a failure, or when life ends
// (Backend.Close).
func (h *hub) runListener(life context.Context) {
	ctx, cancel := context.WithTimeout(life, listenOpenTimeout)
	nc, err := h.lst.Listen(ctx, h.s.db, wakeChannel(h.s.cfg.table))
	cancel()
	if life.Err() != nil {
		if nc != nil {
			nc.Close()
		}
		h.setState(lnOff, "")
		return
	}
	if err != nil {
		h.setState(lnOff, "opening the LISTEN connection failed: "+h.s.cl.wrap(ctx, "listen", err).Error())
		return
	}
	defer nc.Close()
	h.mu.Lock()
	h.state = lnProbing
	h.resyncLocked(false) // releases between the waiters' attempts and LISTEN
	h.mu.Unlock()

	token := randToken()
	pctx, cancel := context.WithTimeout(life, listenProbeTimeout)
	_, err = h.s.db.ExecContext(pctx, "SELECT pg_notify($1, $2)", wakeChannel(h.s.cfg.table), "p "+token)
	cancel()
	if life.Err() != nil {
		h.setState(lnOff, "")
		return
	}
	if err != nil {
		h.setState(lnOff, "sending the probe notification failed: "+h.s.cl.wrap(pctx, "listen", err).Error())
		return
	}
	probeBy := time.Now().Add(listenProbeTimeout)
	heard, pruned := time.Now(), time.Now()
	for {
		h.mu.Lock()
		state, idle := h.state, h.nwait == 0 && time.Since(h.idleSince) >= listenIdle
		h.mu.Unlock()
		if state == lnOn && idle {
			h.setState(lnOff, "")
			return
		}
		slice := listenQuiet
		if state == lnProbing {
			slice = time.Until(probeBy)
			if slice <= 0 {
				h.setState(lnOff, fmt.Sprintf("the probe notification did not come back through the LISTEN connection within %v "+
					"(a pooler in transaction mode, such as PgBouncer, does not forward notifications)", listenProbeTimeout))
				return
			}
		}
		wctx, cancel := context.WithTimeout(life, min(slice, listenIdle))
		payload, err := nc.Wait(wctx)
		timedOut := wctx.Err() != nil
		cancel()
		if life.Err() != nil {
			h.setState(lnOff, "")
			return
		}
		if err != nil && !timedOut {
			h.setState(lnOff, "the LISTEN connection failed: "+h.s.cl.wrap(context.Background(), "listen", err).Error())
			return
		}
		if time.Since(pruned) >= listenQuiet {
			h.pruneAll()
			pruned = time.Now()
		}
		if err != nil {
			if state == lnOn && time.Since(heard) >= listenQuiet {
				pctx, cancel := context.WithTimeout(context.Background(), listenProbeTimeout)
				err := nc.Ping(pctx)
				cancel()
				if err != nil {
					h.setState(lnOff, "the LISTEN connection failed a ping: "+h.s.cl.wrap(pctx, "listen", err).Error())
					return
				}
				heard = time.Now()
			}
			continue
		}
		heard = time.Now()
		if p := h.dispatch(payload); p != "" && p == token && state == lnProbing {
			h.setState(lnOn, "")
		}
	}
}

// status reports the listener's state; with settle it first opens the
// LISTEN connection if needed and waits (bounded by ctx) until its probe
// came back or it failed.
func (h *hub) status(ctx context.Context, settle bool) NotificationStatus {
	h.mu.Lock()
	if settle {
		h.nwait++ // keep it open while we look
		h.ensureListenerLocked()
		ch := h.settled
		starting := h.state == lnStarting || h.state == lnProbing
		h.mu.Unlock()
		if starting {
			select {
			case <-ch:
			case <-ctx.Done():
			}
		}
		h.mu.Lock()
		h.nwait--
		if h.nwait == 0 {
			h.idleSince = time.Now()
		}
	}
	defer h.mu.Unlock()
	st := NotificationStatus{Active: h.state == lnOn, Reason: h.reason}
	switch h.state {
	case lnStarting:
		st.Reason = "the LISTEN connection is being opened"
	case lnProbing:
		st.Reason = "the LISTEN connection is open; its probe has not come back yet"
	}
	return st
}

// NotificationStatus reports whether Lock and WithLock on b are woken by
// notifications when a contended key is released (Active), or fall back to
// polling, and why. With check set it first opens the Backend's LISTEN
// connection if none is open and waits, at most until ctx is done, for its
// probe notification to come back; syncguard doctor uses it. Without check
// it does no I/O.
func (b *Backend) NotificationStatus(ctx context.Context, check bool) NotificationStatus {
	return b.shared.hub.status(ctx, check)
}

// close stops the LISTEN connection, if any, and waits until it is closed.
func (h *hub) close() {
	h.mu.Lock()
	stop, done := h.stopListener, h.listenerDone
	h.stopListener = nil
	h.mu.Unlock()
	if stop != nil {
		stop()
		<-done
	}
}

// Close closes what the Backend opened itself: the LISTEN connection that
// wakes waiting Lock and WithLock calls, if one is open, and its goroutine.
// It does not close the *sql.DB. The Backend stays usable: a later wait
// opens a new LISTEN connection, and waits in progress poll until then.
// Without Close that connection closes itself 30 s after the last wait.
func (b *Backend) Close() error {
	b.shared.hub.close()
	return nil
}
