package waiting

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/syncguard/syncguard-go/driver"
)

// serve opens, probes and serves one connection until it fails or is no
// longer wanted; it returns the status to record (KindNone: closed idle).
func (w *Waker) serve() Status {
	failed := func(what string, err error) Status {
		return Status{Kind: KindFailed, Reason: what + ": " + err.Error()}
	}
	ctx, cancel := context.WithTimeout(w.ctx, w.cfg.OpenTimeout)
	conn, err := w.cfg.Open(ctx, w.probe)
	cancel()
	if err != nil {
		return failed("opening the LISTEN connection", err)
	}
	defer conn.Close()
	// Through the pool first: committed before Notify's, it comes first if
	// it comes at all (one database delivers in commit order). Sending
	// has OpenTimeout (a loaded server is slow to commit); the probe's
	// wait, once sent, ProbeTimeout.
	ctx, cancel = context.WithTimeout(w.ctx, w.cfg.OpenTimeout)
	poolProbe, poolReaches := w.probe+":pool", w.cfg.Pool == nil
	if w.cfg.Pool != nil {
		err = w.cfg.Pool(ctx, w.probe, poolProbe)
	}
	if err == nil {
		err = w.cfg.Notify(ctx, w.probe, w.probe)
	}
	cancel()
	ctx, cancel = context.WithTimeout(w.ctx, w.cfg.ProbeTimeout)
	for err == nil {
		// Only the probe channel is listened on yet: the rest is forged.
		var n driver.Notification
		if n, err = conn.Wait(ctx); err == nil && n == (driver.Notification{Channel: w.probe, Payload: w.probe}) {
			break
		}
		poolReaches = poolReaches || err == nil && n == (driver.Notification{Channel: w.probe, Payload: poolProbe})
	}
	timedOut := ctx.Err() != nil
	if err == nil { // listening sessions cost every notifying commit in the database: only key channels are listened
		err = conn.Exec(ctx, "UNLISTEN "+quote(w.probe))
	}
	cancel()
	if err != nil {
		if w.ctx.Err() != nil {
			return Status{Kind: KindClosed}
		}
		if timedOut {
			return Status{Kind: KindProbeLost, Reason: fmt.Sprintf("the LISTEN connection's probe notification did not come back within %v: a pooler in transaction mode does not forward notifications", w.cfg.ProbeTimeout)}
		}
		return failed("probing the LISTEN connection", err)
	}
	w.mu.Lock()
	w.backoff = 0
	w.setLocked(Status{Active: true, PoolReaches: poolReaches})
	w.mu.Unlock()
	last := time.Now() // the last sign of life
	for {
		now := time.Now()
		w.mu.Lock()
		if w.closed {
			w.mu.Unlock()
			return Status{Kind: KindClosed}
		}
		if !w.wantedLocked(now) {
			w.mu.Unlock()
			return Status{}
		}
		stmts, names := w.commandsLocked(now)
		w.mu.Unlock()
		// One statement per Exec: lib/pq's ListenerConn takes a second
		// CommandComplete in one simple query for a protocol error and
		// closes the connection.
		for _, stmt := range stmts {
			ctx, cancel := context.WithTimeout(w.ctx, w.cfg.OpenTimeout)
			err := conn.Exec(ctx, stmt)
			cancel()
			if err != nil {
				return failed("LISTEN", err)
			}
			last = time.Now()
		}
		if len(names) > 0 {
			w.markListened(names)
		}
		wait := w.cfg.Ping - time.Since(last)
		if wait <= 0 {
			ctx, cancel := context.WithTimeout(w.ctx, w.cfg.ProbeTimeout)
			err := conn.Ping(ctx)
			cancel()
			if err != nil {
				return failed("pinging the LISTEN connection", err)
			}
			last = time.Now()
			continue
		}
		ctx, cancel := context.WithTimeout(w.ctx, min(wait, w.cfg.Linger))
		w.mu.Lock()
		w.kick = cancel
		w.mu.Unlock()
		n, err := conn.Wait(ctx)
		ended := ctx.Err() != nil // a timeout or a kick, not a failure
		w.mu.Lock()
		w.kick = nil
		w.mu.Unlock()
		cancel()
		switch {
		case err == nil:
			last = time.Now()
			w.deliver(n)
		case w.ctx.Err() != nil:
			return Status{Kind: KindClosed}
		case !ended:
			return failed("waiting for notifications", err)
		}
	}
}

// commandsLocked returns the LISTEN and UNLISTEN statements the wanted
// channels need, and the channels they LISTEN on.
func (w *Waker) commandsLocked(now time.Time) ([]string, []string) {
	var stmts, names []string
	for name, c := range w.chans {
		switch {
		case len(c.members) > 0 && !c.listened:
			stmts = append(stmts, "LISTEN "+quote(name))
			names = append(names, name)
		case len(c.members) == 0 && now.Sub(c.idle) >= w.cfg.Linger:
			if c.listened {
				stmts = append(stmts, "UNLISTEN "+quote(name))
			}
			delete(w.chans, name)
			w.dropped = now
		}
	}
	sort.Strings(stmts)
	return stmts, names
}

// markListened marks names as listened on and signals their members.
func (w *Waker) markListened(names []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, n := range names {
		if c := w.chans[n]; c != nil {
			c.listened = true
			for u := range c.members {
				u.signal()
			}
		}
	}
}

func quote(name string) string { return `"` + strings.ReplaceAll(name, `"`, `""`) + `"` }
