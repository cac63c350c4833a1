package cli

import (
	"cmp"
	"context"
	"errors"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/syncguard/syncguard-go/election"
)

func (a *app) cmdElect(args []string) error {
	fs := a.flagSet("elect")
	var o runOpts
	fs.StringVar(&o.key, "key", "", "the election's `KEY` (required)")
	fs.StringVar(&o.identity, "identity", "", "this candidate's `NAME`, shown by syncguard leader (default host:pid:COMMAND)")
	durationVar(fs, &o.ttl, "ttl", election.DefaultTTL, minTTL, maxTTL, "the leader's lock TTL (`DURATION`), extended every ttl/3: a killed leader is replaced within about ttl+1s")
	durationVar(fs, &o.grace, "grace", defaultGrace, 0, maxGrace, "after leadership is lost, or on shutdown: time between SIGTERM and SIGKILL to COMMAND (`DURATION`)")
	durationVar(fs, &o.again, "recampaign", election.DefaultRecampaign, 0, maxWait, "after COMMAND exits: wait this long (`DURATION`) before campaigning again")
	fs.StringVar(&o.fenceEnv, "fence-env", defaultFenceEnv, "environment variable `NAME` that gives COMMAND its term (the lock's fence)")
	command, err := a.parseCmd(fs, args, false, `
Runs COMMAND whenever this process is the elected leader of KEY, for
long-running singleton daemons: it campaigns (queued behind the other
candidates), runs COMMAND with its term in $SYNCGUARD_FENCE (strictly
increasing across leaders: fence the daemon's writes with it; NAME_NUM
has it as a plain decimal number), and when
COMMAND exits, resigns (the next candidate is elected at once) and
campaigns again. When leadership is lost (the lock could not be extended)
COMMAND gets SIGTERM, then SIGKILL after --grace or before the lock can
expire, whichever is first, and syncguard campaigns again. SIGINT, SIGTERM
or SIGHUP stops COMMAND the same way, resigns and exits 0.

COMMAND runs under the same supervisor as with 'syncguard run': its whole
process tree is stopped before the term is resigned (on Linux, background
and orphaned descendants too); a kill -9 of syncguard takes the tree down
with it, and the supervisor kills the tree by itself at the lock's last
confirmed expiry, should syncguard be stopped or hang. Without a terminal
COMMAND runs in a process group of its own; with one it stays in the
terminal's foreground group (^C and ^Z reach it).

Compared: 'syncguard run --wait forever' runs COMMAND once, as the lock's
holder, and exits with its status; 'consul lock' also re-runs nothing and
gives no fence. Use elect for a daemon that must always run somewhere.`)
	if err != nil {
		return err
	}
	switch {
	case o.key == "":
		return usageErr("--key is required")
	case len(command) == 0:
		return usageErr("no command given: syncguard elect --key KEY [flags] -- COMMAND [ARG...]")
	case !envNameRE.MatchString(o.fenceEnv) || o.fenceEnv == keyEnv:
		return usageErr("--fence-env %q is not a usable variable name", o.fenceEnv)
	}
	o.command = command
	if o.path, err = exec.LookPath(command[0]); err != nil {
		return startError(command[0], err)
	}
	o.identity = cmp.Or(o.identity, defaultIdentity(command[0]))
	db, b, err := a.backend()
	if err != nil {
		return err
	}
	defer db.Close()
	e, err := election.New(b, o.key, &election.Options{Identity: o.identity, TTL: o.ttl, Recampaign: o.again})
	if err != nil {
		return err
	}
	sigCtx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	// The campaign's context resigns the term when it ends, so a signal
	// must not end it while COMMAND's tree may run: the next leader's
	// COMMAND would start beside it. A signal ends a campaign at once; a
	// term ends it only after the tree is gone.
	runCtx, endRun := context.WithCancel(context.Background())
	defer endRun()
	var mu sync.Mutex
	leading := false
	context.AfterFunc(sigCtx, func() {
		mu.Lock()
		defer mu.Unlock()
		if !leading {
			endRun()
		}
	})
	// With a terminal COMMAND stays in its foreground group (^Z, ^C and a
	// hang-up reach it as they reach syncguard), as with run --foreground.
	o.foreground = hasControllingTTY()
	_ = becomeSubreaper() // for the tree, should the supervisor die
	return e.Run(runCtx, func(ctx context.Context, term *election.Term) error {
		mu.Lock()
		if runCtx.Err() != nil || sigCtx.Err() != nil || ctx.Err() != nil {
			mu.Unlock()
			return nil // ended while elected: nothing started
		}
		leading = true
		mu.Unlock()
		defer func() {
			mu.Lock()
			defer mu.Unlock()
			leading = false
			if sigCtx.Err() != nil {
				endRun() // the tree is gone: resign and exit
			}
		}()
		a.leadTerm(ctx, sigCtx, term, &o)
		return nil
	})
}

// leadTerm runs COMMAND under a supervisor for one term, until its whole
// tree has exited by itself, or stopped when the term ends (ctx) or a
// signal came (sigCtx); the dead man's switch follows Lease.HeldUntil.
func (a *app) leadTerm(ctx, sigCtx context.Context, term *election.Term, o *runOpts) {
	name := o.command[0]
	a.notef("elected leader of %s as %s, term %s: starting %s", displayKey(o.key), o.identity, term.Fence(), name)
	env := childEnv(a.environ(), o.fenceEnv, o.key, term.Fence())
	confirmed := term.Lease().HeldUntil()
	sup, err := startTree(supervisorSpec{Path: o.path, Argv: o.command, Env: env, Foreground: o.foreground,
		Deadline: encodeDeadline(confirmed)}, a.stdin, a.stdout, a.stderr)
	if err != nil {
		_, code, msg := describe(startError(name, err))
		a.errorf(code, "%s; resigning term %s", msg, term.Fence())
		return
	}
	// The extends run every ttl/3; a tenth of the ttl passes the new expiry
	// on well before the old one.
	poll := time.NewTicker(max(min(o.ttl/10, time.Second), 10*time.Millisecond))
	defer poll.Stop()
	var killC <-chan time.Time
	stopping, status := false, -1
	var gone *treeEvent
	deadman := false // the supervisor killed the tree at the confirmed expiry
	// stopTree: SIGTERM now, SIGKILL after --grace; once the term is lost,
	// at its confirmed expiry at the latest.
	stopTree := func(why string) {
		if stopping {
			return
		}
		stopping = true
		d := o.grace
		if err := term.Err(); err != nil && !errors.Is(err, election.ErrResigned) {
			d = max(min(d, time.Until(term.Lease().HeldUntil())), 0)
		}
		if why != "" {
			a.notef("%s: SIGTERM now, SIGKILL after %v", why, fmtDuration(d))
		}
		sup.terminate()
		if d <= 0 {
			sup.kill()
			return
		}
		killC = time.After(d)
	}
	termDone, sigDone, events := ctx.Done(), sigCtx.Done(), sup.events
	for events != nil {
		select {
		case <-termDone:
			termDone = nil
			stopTree("")
		case <-sigDone:
			sigDone = nil
			stopTree("")
		case <-poll.C:
			if h := term.Lease().HeldUntil(); h.After(confirmed) {
				confirmed = h
				sup.setDeadline(h)
			}
		case <-killC:
			killC = nil
			sup.kill()
		case ev, ok := <-events:
			if !ok {
				events = nil
				break
			}
			switch ev.kind {
			case "exit":
				status = ev.status
				if len(ev.left) > 0 || !treeTracking && !o.foreground {
					// What COMMAND left running is stopped before the
					// term is resigned: no two leaders' processes overlap.
					why := ""
					if len(ev.left) > 0 {
						why = name + " exited; stopping what is left of its process tree (pids " + joinInts(ev.left) + ")"
					}
					stopTree(why)
				}
			case "deadman":
				deadman = true
				a.errorf("LockLost", "term %s of %s reached its last confirmed expiry before syncguard could extend it (was syncguard stopped or starved?); the supervisor killed %s and its process tree",
					term.Fence(), displayKey(o.key), name)
			case "gone":
				gone = &ev
			}
		}
	}
	if gone != nil {
		reapOrphans()
		a.errorf("warning", "the supervisor of %s died (%s); its processes were killed", name, gone.err)
	}
	result := "status " + strconv.Itoa(status)
	switch {
	case status < 0:
		result = "no exit status: its supervisor died"
	case status >= 128:
		result += " (" + signalName(syscall.Signal(status-128)) + ")"
	}
	if cause := term.Err(); cause != nil || deadman {
		if cause == nil {
			cause = errors.New("its last confirmed expiry passed")
		}
		a.notef("term %s ended (%v): %s stopped (%s)", term.Fence(), cause, name, result)
	} else {
		a.notef("%s exited (%s): resigning term %s, campaigning again in %s", name, result, term.Fence(), fmtDuration(o.again))
	}
}
