package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/syncguard/syncguard-go/syncguard"
)

// The lock is held at least until Lease.HeldUntil, its confirmed expiry:
// run has the tree SIGKILLed then at the latest, whatever --grace says,
// and so does the supervisor on its own (a dead man's switch).

// extends carries the lease's extends to runHolding, in order: nil for one
// the server confirmed (OnExtend), the error of one that failed (bounded).
type extends struct {
	c    chan error
	done chan struct{} // closed when runHolding stops listening
}

func (e *extends) send(err error) {
	select {
	case e.c <- err:
	case <-e.done:
	}
}

// holding is the state of runHolding.
type holding struct {
	a     *app
	o     *runOpts
	lease *syncguard.Lease
	sup   *supervisor
	killC <-chan time.Time

	lost      bool           // the lock is lost: exit 76
	stopped   syscall.Signal // COMMAND stopped on the terminal: exit 128+N
	stopping  bool           // the tree has been told to stop
	outage    time.Time      // start of the current run of failed extends
	cmdStatus int
	treeDone  bool
	gone      *treeEvent // the supervisor died
}

// runHolding runs the command while lease is held (the library's
// AutoExtend keeps it, ext reports its extends), then releases the lock.
func (a *app) runHolding(o *runOpts, lease *syncguard.Lease, ext *extends, sigs <-chan os.Signal) error {
	h := &holding{a: a, o: o, lease: lease}
	_ = becomeSubreaper() // for the tree, should the supervisor die

	sup, err := startTree(supervisorSpec{
		Path: o.path, Argv: o.command, Env: childEnv(a.environ(), o.fenceEnv, o.key, lease.Fence(), o.env...),
		Foreground: o.foreground, TTY: hasControllingTTY(), Deadline: encodeDeadline(lease.HeldUntil()),
	}, a.stdin, a.stdout, a.stderr)
	if err != nil {
		close(ext.done)
		if err := a.release(o, lease, sigs); err != nil {
			return err
		}
		var pe *os.PathError
		if errors.As(err, &pe) {
			return startError(o.command[0], err)
		}
		return &cliError{status: ExitInternal, code: string(syncguard.ErrInternal), msg: err.Error()}
	}
	h.sup = sup
	if o.verbose {
		a.notef("running %s (pid %d)", o.command[0], sup.pid)
	}
	started := time.Now()

	leaseDone, events := lease.Done(), sup.events
	for !h.treeDone {
		select {
		case err := <-ext.c:
			h.extended(err)
		case <-leaseDone:
			leaseDone = nil
			if why := lossText(lease); why != "" {
				h.lose(trim(why, 240))
			}
		case <-h.killC:
			h.killC = nil
			a.errorf("", "%s: sending SIGKILL to what is left of its process tree", o.command[0])
			sup.kill()
		case s := <-sigs:
			h.signal(s)
		case ev, ok := <-events:
			if !ok {
				events = nil
				h.treeDone = true
				break
			}
			h.event(ev)
		}
	}
	close(ext.done)
	if h.gone != nil {
		reapOrphans()
	}
	// Signals that came as the tree finished were for it.
	for len(sigs) > 0 {
		<-sigs
	}
	if err := a.release(o, lease, sigs); err != nil {
		return err
	}
	switch {
	case h.lost:
		return &cliError{status: ExitLost, code: "LockLost", silent: true}
	case h.stopped != 0:
		return &cliError{status: 128 + int(h.stopped), silent: true}
	case h.gone != nil:
		return &cliError{status: ExitInternal, code: string(syncguard.ErrInternal),
			msg: fmt.Sprintf("the supervisor of %s died (%s); its processes were killed", o.command[0], h.gone.err)}
	}
	if o.verbose {
		a.notef("%s exited with status %d after %v", o.command[0], h.cmdStatus, time.Since(started).Round(time.Millisecond))
	}
	if h.cmdStatus != 0 {
		return &cliError{status: h.cmdStatus, silent: true}
	}
	return nil
}

// extended handles an extend: a confirmed one moves the supervisor's
// deadline; one warning when extends start failing, one line when they
// work again (none with --quiet).
func (h *holding) extended(err error) {
	a, o := h.a, h.o
	switch {
	case h.lost || h.lease.Err() != nil:
		// The tree is being stopped on the deadline already set, or
		// lease.Done reports the end.
	case err == nil:
		h.sup.setDeadline(h.lease.HeldUntil())
		if !h.outage.IsZero() && !o.quiet {
			a.notef("extended the lock on %s again after %v of failed attempts; still held", o.label(), short(time.Since(h.outage)))
		}
		h.outage = time.Time{}
	case h.outage.IsZero():
		h.outage = time.Now()
		if !o.quiet {
			_, code, msg := describe(err)
			a.errorf("warning", "cannot extend the lock on %s (%s: %s); retrying until its confirmed expiry in %v, when %s is stopped",
				o.label(), code, trim(msg, 160), short(max(time.Until(h.lease.HeldUntil()), 0)), o.command[0])
		}
	}
}

// lossText says why lease lost its lock (Lease.LossReason), with the last
// extend's error when it was not extended in time; "" when it was not lost.
func lossText(lease *syncguard.Lease) string {
	why := map[string]string{"gone": "extend found it gone (released, deleted or taken over)", "expired": "extend found it expired",
		"not-extended": "not extended before its guaranteed lifetime ran out"}[lease.LossReason()]
	var last *syncguard.Error
	if why != "" && errors.As(lease.Err(), &last) {
		why += "; last extend error: " + last.Error()
	}
	return why
}

// lose handles the loss of the lock: stop the tree.
func (h *holding) lose(reason string) {
	if h.lost {
		return
	}
	h.lost = true
	h.stopTree("LockLost", fmt.Sprintf("lost the lock on %s (%s)", h.o.label(), reason))
}

// stopTree sends SIGTERM to the tree now and has it SIGKILLed after
// --grace, or at the lock's confirmed expiry if that comes first.
func (h *holding) stopTree(code, why string) {
	if h.stopping {
		return
	}
	h.stopping = true
	o := h.o
	left, grace := time.Until(h.lease.HeldUntil()), o.grace
	when := fmt.Sprintf("SIGKILL after --grace %v", fmtDuration(o.grace))
	switch {
	case left <= 0:
		grace = 0
		when = "SIGKILL now: the lock's last confirmed expiry has passed"
	case left < grace:
		grace = left
		when = fmt.Sprintf("SIGKILL in %v (--grace %v shortened: the lock's last confirmed expiry is %v away)", short(left), fmtDuration(o.grace), short(left))
	case grace == 0:
		when = "SIGKILL now (--grace 0)"
	}
	h.a.errorf(code, "%s; stopping %s and its process tree: SIGTERM now, %s", why, o.command[0], when)
	h.sup.terminate()
	if grace <= 0 {
		h.sup.kill()
		return
	}
	h.killC = time.After(grace)
}

func (h *holding) signal(s os.Signal) {
	switch {
	case isSuspend(s):
		// ^Z stopped syncguard's process group, not the tree's own one:
		// stop the tree with us.
		h.sup.signal(sigTSTP)
		stopSelf()
		// Continued: the tree too while the lock is confirmed, short of the
		// lease's margin (else the lease's loss stops it).
		if !h.lost && h.lease.Err() == nil && time.Until(h.lease.HeldUntil()) > min(h.o.ttl/10, time.Second) {
			h.sup.signal(sigCONT)
		}
	case forwardable(s, h.o.foreground):
		if h.o.verbose {
			h.a.notef("forwarding %s to %s", signalName(s), h.o.command[0])
		}
		if sig, ok := s.(syscall.Signal); ok {
			h.sup.signal(sig)
		}
	}
}

func (h *holding) event(ev treeEvent) {
	a, o := h.a, h.o
	switch ev.kind {
	case "exit":
		h.cmdStatus = ev.status
		if len(ev.left) > 0 && o.verbose {
			a.notef("%s exited with status %d; holding the lock until its %s exit (pids %s)", o.command[0], ev.status,
				plural(len(ev.left), "remaining process", "remaining processes"), joinInts(ev.left))
		}
	case "stop":
		h.stoppedEvent(ev)
	case "deadman":
		if !h.lost {
			h.lost = true
			a.errorf("LockLost", "the lock on %s reached its last confirmed expiry before syncguard could extend it (was syncguard stopped or starved?); the supervisor killed %s and its process tree",
				o.label(), o.command[0])
		}
	case "done":
		h.treeDone = true
	case "gone":
		h.treeDone = true
		h.gone = &ev
		if ev.err == "" {
			ev.err = "status " + strconv.Itoa(ev.status)
		}
	}
}

// stoppedEvent handles a process of the tree that stopped: on the
// terminal (SIGTTIN, SIGTTOU), COMMAND cannot go on without help.
func (h *holding) stoppedEvent(ev treeEvent) {
	a, o := h.a, h.o
	sig := syscall.Signal(ev.sig)
	onTTY := ev.sig == 0 || sig == sigTTIN || sig == sigTTOU
	what := o.command[0]
	if ev.pid != h.sup.pid {
		what = fmt.Sprintf("a process of %s", o.command[0])
	}
	switch {
	case onTTY && o.foreground:
		// COMMAND shares syncguard's process group, which is in the
		// background of the terminal: fg lets it go on.
		a.errorf("warning", "%s (pid %d) is stopped (%s): it uses the terminal while syncguard runs in the background; bring syncguard to the foreground (fg) to let it continue; the lock stays held meanwhile",
			what, ev.pid, stopName(sig))
	case onTTY:
		if sig == 0 {
			sig = sigTTIN
		}
		if h.stopped == 0 {
			h.stopped = sig
		}
		h.stopTree("Stopped", fmt.Sprintf("%s (pid %d) stopped on %s: it uses the terminal, which commands run in a process group of their own may not; run interactive commands with --foreground",
			what, ev.pid, stopName(syscall.Signal(ev.sig))))
	case o.verbose:
		a.notef("%s (pid %d) was stopped by %s; the lock stays held", what, ev.pid, signalName(sig))
	}
}

func stopName(s syscall.Signal) string {
	if s == 0 {
		return "SIGTTIN or SIGTTOU"
	}
	return signalName(s)
}

// joinInts formats pids: "1,2,3".
func joinInts(ns []int) string {
	return strings.ReplaceAll(strings.Trim(fmt.Sprint(ns), "[]"), " ", ",")
}

// release releases the lock. While it waits for the database, SIGINT,
// SIGTERM, SIGHUP and SIGQUIT end it (the lock then expires by its TTL):
// the error is then syncguard's exit, 128+N.
func (a *app) release(o *runOpts, lease *syncguard.Lease, sigs <-chan os.Signal) error {
	var res syncguard.ReleaseResult
	var err error
	done := make(chan struct{})
	go func() {
		defer close(done)
		ctx, cancel := context.WithTimeout(context.Background(), a.timeout)
		defer cancel()
		res, err = lease.Release(ctx)
	}()
	for {
		select {
		case <-done:
			switch {
			case err != nil:
				_, code, msg := describe(err)
				a.errorf(code, "could not release the lock on %s; it expires by itself within %v (--ttl): %s", o.label(), fmtDuration(o.ttl), trim(msg, 200))
			case o.verbose && res.OK:
				a.notef("released %s (fence %s)", o.label(), lease.Fence())
			}
			return nil
		case s := <-sigs:
			if abortsWait(s) {
				a.errorf(string(syncguard.ErrAborted), "got %s while releasing the lock on %s; not waiting for PostgreSQL: the lock expires by itself within %v (--ttl)",
					signalName(s), o.label(), fmtDuration(o.ttl))
				return &cliError{status: 128 + signalNumber(s), silent: true}
			}
		}
	}
}
