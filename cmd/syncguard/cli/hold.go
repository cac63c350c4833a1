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

// Timing of a held lock, on this machine's monotonic clock. The server set
// the lock's expiry to its statement time + ttl, and that statement ran
// after the request was sent, so the lock is held at least until
//
//	confirmed = sent + ttl - 1ms
//
// for the latest successful acquire or extend (the server counts whole
// milliseconds). Other hosts can take the key only TimeToleranceMs (1 s)
// after that expiry. run declares the lock lost a tenth of the ttl (at
// most 1 s) before confirmed, as the library's leases do, and has
// COMMAND's whole process tree SIGKILLed at confirmed at the latest,
// whatever --grace says, keeping the full tolerance as headroom for
// delivering the signal. The supervisor enforces the same deadline on its
// own (a dead man's switch), should syncguard be stopped or hang.

// granted is the lifetime an acquire or extend with ttl guarantees from
// its send time.
func granted(ttl time.Duration) time.Duration {
	return max(ttl.Truncate(time.Millisecond)-time.Millisecond, 0)
}

// lossMargin is how long before the confirmed expiry the lock is
// declared lost.
func lossMargin(ttl time.Duration) time.Duration { return min(granted(ttl)/10, time.Second) }

// keeper extends the lease: a third of the lifetime after each successful
// extend's send time, every tenth of the ttl after a failure, until the
// lock's confirmed expiry. The library's AutoExtend does the same; run
// does it itself to learn each extend's send time.
type keeper struct {
	lease   *syncguard.Lease
	ttl     time.Duration
	timeout time.Duration
	results chan extendResult
	kick    chan struct{}
	ctx     context.Context
	stop    context.CancelFunc
	done    chan struct{}
}

type extendResult struct {
	ok        bool
	err       error     // nil with ok false: the lock is gone
	confirmed time.Time // when ok
}

func startKeeper(lease *syncguard.Lease, ttl, timeout time.Duration, sent time.Time) *keeper {
	ctx, stop := context.WithCancel(context.Background())
	k := &keeper{lease: lease, ttl: ttl, timeout: timeout, results: make(chan extendResult),
		kick: make(chan struct{}, 1), ctx: ctx, stop: stop, done: make(chan struct{})}
	go k.loop(sent)
	return k
}

// now asks for an extend at once.
func (k *keeper) now() {
	select {
	case k.kick <- struct{}{}:
	default:
	}
}

// close stops the keeper and waits for it, so that no extend runs during
// or after the release.
func (k *keeper) close() {
	k.stop()
	<-k.done
}

func (k *keeper) loop(sent time.Time) {
	defer close(k.done)
	g := granted(k.ttl)
	confirmed := sent.Add(g)
	t := time.NewTimer(time.Until(sent.Add(g / 3)))
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-k.kick:
		case <-k.ctx.Done():
			return
		}
		sent := time.Now()
		if !sent.Before(confirmed) {
			return // an answer now cannot keep the lock: it is lost
		}
		// An answer after the confirmed expiry is of no use.
		ctx, cancel := context.WithDeadline(k.ctx, earliest(sent.Add(k.timeout), confirmed))
		res, err := k.lease.Extend(ctx, k.ttl)
		cancel()
		if k.ctx.Err() != nil {
			return
		}
		r := extendResult{ok: err == nil && res.OK, err: err}
		next := time.Now().Add(max(k.ttl/10, time.Millisecond))
		if r.ok {
			confirmed = sent.Add(g)
			r.confirmed = confirmed
			next = sent.Add(g / 3)
		}
		select {
		case k.results <- r:
		case <-k.ctx.Done():
			return
		}
		if !r.ok && (err == nil || k.lease.Err() != nil) {
			return // lost
		}
		t.Reset(time.Until(next))
	}
}

func earliest(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// holding is the state of runHolding.
type holding struct {
	a         *app
	o         *runOpts
	lease     *syncguard.Lease
	sup       *supervisor
	keeper    *keeper
	confirmed time.Time // the lock's last confirmed expiry (see above)
	lostAt    time.Time
	lossTimer *time.Timer
	killC     <-chan time.Time

	lost      bool           // the lock is lost: exit 76
	stopped   syscall.Signal // COMMAND stopped on the terminal: exit 128+N
	stopping  bool           // the tree has been told to stop
	outage    time.Time      // start of the current run of failed extends
	cmdStatus int
	cmdExited bool
	treeDone  bool
	gone      *treeEvent // the supervisor died
}

// runHolding runs the command while lease is held, then releases the
// lock. sent is when the acquire was sent.
func (a *app) runHolding(o *runOpts, lease *syncguard.Lease, sent time.Time, sigs <-chan os.Signal) error {
	h := &holding{a: a, o: o, lease: lease, confirmed: sent.Add(granted(o.ttl))}
	h.lostAt = h.confirmed.Add(-lossMargin(o.ttl))
	_ = becomeSubreaper() // for the tree, should the supervisor die

	sup, err := startTree(supervisorSpec{
		Path: o.path, Argv: o.command, Env: childEnv(a.environ(), o, lease.Fence()),
		Foreground: o.foreground, TTY: hasControllingTTY(), Deadline: encodeDeadline(h.confirmed),
	}, a.stdin, a.stdout, a.stderr)
	if err != nil {
		if s := a.release(o, lease, sigs); s != nil {
			return &cliError{status: 128 + signalNumber(s), silent: true}
		}
		var pe *os.PathError
		if errors.As(err, &pe) {
			return startError(o.command[0], err)
		}
		return &cliError{status: ExitInternal, code: string(syncguard.CodeInternal), msg: err.Error()}
	}
	h.sup = sup
	if o.verbose {
		a.notef("running %s (pid %d)", o.command[0], sup.pid)
	}
	h.keeper = startKeeper(lease, o.ttl, a.timeout, sent)
	h.lossTimer = time.NewTimer(time.Until(h.lostAt))
	defer h.lossTimer.Stop()
	started := time.Now()

	leaseDone := lease.Done()
	events := sup.events
	for !h.treeDone {
		select {
		case r := <-h.keeper.results:
			h.extended(r)
		case <-leaseDone:
			leaseDone = nil
			if err := lease.Err(); errors.Is(err, syncguard.ErrLockLost) {
				h.lose(strings.TrimPrefix(err.Error(), syncguard.ErrLockLost.Error()+": "))
			}
		case <-h.lossTimer.C:
			if !time.Now().Before(h.lostAt) {
				h.lose("not extended before its guaranteed lifetime ran out")
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
	h.keeper.close()
	if h.gone != nil {
		reapOrphans()
	}
	// Signals that came as the tree finished were for it.
	for len(sigs) > 0 {
		<-sigs
	}
	if s := a.release(o, lease, sigs); s != nil {
		return &cliError{status: 128 + signalNumber(s), silent: true}
	}
	switch {
	case h.lost:
		return &cliError{status: ExitLost, code: "LockLost", silent: true}
	case h.stopped != 0:
		return &cliError{status: 128 + int(h.stopped), silent: true}
	case h.gone != nil:
		return &cliError{status: ExitInternal, code: string(syncguard.CodeInternal),
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

// extended handles an extend's result: one warning when extends start
// failing, one line when they work again (none with --quiet).
func (h *holding) extended(r extendResult) {
	a, o := h.a, h.o
	if h.lost {
		return // the tree is being stopped on the deadline already set
	}
	if r.ok {
		h.confirmed = r.confirmed
		h.lostAt = r.confirmed.Add(-lossMargin(o.ttl))
		h.sup.setDeadline(h.confirmed)
		h.lossTimer.Reset(time.Until(h.lostAt))
		if !h.outage.IsZero() {
			if !o.quiet {
				a.notef("extended the lock on %s again after %v of failed attempts; still held", displayKey(o.key), short(time.Since(h.outage)))
			}
			h.outage = time.Time{}
		}
		return
	}
	if r.err == nil || errors.Is(r.err, syncguard.ErrLockLost) || h.lease.Err() != nil {
		return // the lease has ended: lease.Done reports it
	}
	if h.outage.IsZero() {
		h.outage = time.Now()
		if !o.quiet {
			_, code, msg := describe(r.err)
			a.errorf("warning", "cannot extend the lock on %s (%s: %s); retrying until its confirmed expiry in %v, when %s is stopped",
				displayKey(o.key), code, trim(msg, 160), short(max(time.Until(h.confirmed), 0)), o.command[0])
		}
	}
}

// lose handles the loss of the lock: stop the tree.
func (h *holding) lose(reason string) {
	if h.lost {
		return
	}
	h.lost = true
	h.keeper.stop()
	h.stopTree("LockLost", fmt.Sprintf("lost the lock on %s (%s)", displayKey(h.o.key), reason))
}

// stopTree sends SIGTERM to the tree now and has it SIGKILLed after
// --grace, or at the lock's confirmed expiry if that comes first.
func (h *holding) stopTree(code, why string) {
	if h.stopping {
		return
	}
	h.stopping = true
	o := h.o
	left := time.Until(h.confirmed)
	grace := o.grace
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
		// Continued (fg, bg, SIGCONT). The tree may continue only while
		// the lock is confirmed; otherwise the loss timer stops it.
		if !h.lost && time.Now().Before(h.lostAt) {
			h.sup.signal(sigCONT)
			h.keeper.now()
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
		h.cmdStatus, h.cmdExited = ev.status, true
		if len(ev.left) > 0 && o.verbose {
			a.notef("%s exited with status %d; holding the lock until its %s exit (pids %s)", o.command[0], ev.status,
				plural(len(ev.left), "remaining process", "remaining processes"), joinInts(ev.left))
		}
	case "stop":
		h.stoppedEvent(ev)
	case "deadman":
		if !h.lost {
			h.lost = true
			h.keeper.stop()
			a.errorf("LockLost", "the lock on %s reached its last confirmed expiry before syncguard could extend it (was syncguard stopped or starved?); the supervisor killed %s and its process tree",
				displayKey(o.key), o.command[0])
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

func joinInts(ns []int) string {
	var s []string
	for _, n := range ns {
		s = append(s, strconv.Itoa(n))
	}
	return strings.Join(s, ",")
}

// release releases the lock, and returns the signal that interrupted it,
// if any: while the release waits for the database, SIGINT, SIGTERM, SIGHUP
// and SIGQUIT end it (the lock then expires by its TTL).
func (a *app) release(o *runOpts, lease *syncguard.Lease, sigs <-chan os.Signal) os.Signal {
	type result struct {
		res syncguard.ReleaseResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), a.timeout)
		defer cancel()
		res, err := lease.Release(ctx)
		done <- result{res, err}
	}()
	for {
		select {
		case r := <-done:
			switch {
			case r.err != nil:
				_, code, msg := describe(r.err)
				a.errorf(code, "could not release the lock on %s; it expires by itself within %v (--ttl): %s", displayKey(o.key), fmtDuration(o.ttl), trim(msg, 200))
			case o.verbose && r.res.OK:
				a.notef("released %s (fence %s)", displayKey(o.key), lease.Fence())
			}
			return nil
		case s := <-sigs:
			if abortsWait(s) {
				a.errorf(string(syncguard.CodeAborted), "got %s while releasing the lock on %s; not waiting for PostgreSQL: the lock expires by itself within %v (--ttl)",
					signalName(s), displayKey(o.key), fmtDuration(o.ttl))
				return s
			}
		}
	}
}
