package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/syncguard/syncguard-go/election"
	"github.com/syncguard/syncguard-go/syncguard"
)

// holderText names a lock's holder: its identity when it stored one, else
// the hash of its lockId.
func holderText(info syncguard.LockInfo) string {
	if info.Identity != "" {
		return fmt.Sprintf("%s (lock#%s)", displayKey(info.Identity), info.LockIDHash)
	}
	return fmt.Sprintf("lock#%s (hash of the holder's lockId; it stored no identity)", info.LockIDHash)
}

// defaultIdentity is run's and elect's default --identity: host:pid:COMMAND.
func defaultIdentity(command string) string {
	return syncguard.DefaultIdentity() + ":" + filepath.Base(command)
}

func (a *app) cmdLeader(args []string) error {
	fs := a.flagSet("leader")
	watch := fs.Bool("watch", false, "follow the leadership: one line per change (\"no leader\" included) until interrupted")
	interval := fs.Duration("interval", election.DefaultPollInterval, "with --watch: how often to read the leader at least (`DURATION`)")
	pos, err := a.parseCmd(fs, args, true, `
Shows the leader of the election KEY (syncguard elect, or the election
package): its identity, term (the lock's fence, strictly increasing across
leaders), since when it leads and when its lock expires. It does not
campaign. With --watch it prints a line at every change of term, and "no
leader" when there is none: it reads at each hand-off (a notification) and
every --interval; a term shorter than that may be missed.

Exit status: 0 when there is a leader, 1 when there is none (without
--watch), 64/69/70 on errors.`)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageErr("want exactly one KEY, got %d arguments", len(pos))
	}
	if *interval <= 0 {
		return usageErr("--interval must be positive")
	}
	db, b, err := a.backend()
	if err != nil {
		return err
	}
	defer db.Close()
	e, err := election.New(b, pos[0], &election.Options{PollInterval: *interval})
	if err != nil {
		return err
	}
	if !*watch {
		ctx, cancel := a.ctx()
		defer cancel()
		l, err := e.Leader(ctx)
		if err != nil {
			return err
		}
		a.printLeader(l, false)
		return freeStatus(l == nil)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	for l := range e.Observe(ctx) {
		a.printLeader(l, true)
	}
	return nil
}

func (a *app) printLeader(l *election.Leader, line bool) {
	if a.json {
		out := map[string]any{"leader": nil}
		if l != nil {
			out = map[string]any{"leader": l.Identity, "term": string(l.Term), "since": jsonTime(l.Since), "expiresAt": jsonTime(l.ExpiresAt)}
		}
		_ = writeJSON(a.stdout, out)
		return
	}
	if line {
		if l == nil {
			fmt.Fprintf(a.stdout, "%s no leader\n", stamp(time.Now()))
		} else {
			fmt.Fprintf(a.stdout, "%s leader %s term %s\n", stamp(time.Now()), identityText(l.Identity), l.Term)
		}
		return
	}
	if l == nil {
		fmt.Fprintln(a.stdout, "no leader")
		return
	}
	w := table(a.stdout)
	fmt.Fprintf(w, "leader\t%s\n", identityText(l.Identity))
	fmt.Fprintf(w, "term\t%s\n", l.Term)
	fmt.Fprintf(w, "since\t%s\n", stamp(l.Since))
	fmt.Fprintf(w, "expires\t%s\n", stamp(l.ExpiresAt))
	_ = w.Flush()
}

func identityText(id string) string {
	if id == "" {
		return "(no identity stored)"
	}
	return displayKey(id)
}

func (a *app) cmdElect(args []string) error {
	fs := a.flagSet("elect")
	var key, identity, fenceEnv string
	var ttl, grace, again time.Duration
	fs.StringVar(&key, "key", "", "the election's `KEY` (required)")
	fs.StringVar(&identity, "identity", "", "this candidate's `NAME`, shown by syncguard leader (default host:pid:COMMAND)")
	durationVar(fs, &ttl, "ttl", election.DefaultTTL, minTTL, maxTTL, false, "the leader's lock TTL (`DURATION`), extended every ttl/3: a killed leader is replaced within about ttl+1s")
	durationVar(fs, &grace, "grace", defaultGrace, 0, maxGrace, false, "after leadership is lost, or on shutdown: time between SIGTERM and SIGKILL to COMMAND (`DURATION`)")
	durationVar(fs, &again, "recampaign", election.DefaultRecampaign, 0, maxWait, false, "after COMMAND exits: wait this long (`DURATION`) before campaigning again")
	fs.StringVar(&fenceEnv, "fence-env", defaultFenceEnv, "environment variable `NAME` that gives COMMAND its term (the lock's fence)")
	command, err := a.parseCmd(fs, args, false, `
Runs COMMAND whenever this process is the elected leader of KEY, for
long-running singleton daemons: it campaigns (queued behind the other
candidates), runs COMMAND with its term in $SYNCGUARD_FENCE (strictly
increasing across leaders: fence the daemon's writes with it; NAME_NUM
has it as a plain decimal number), and when
COMMAND exits, resigns (the next candidate is elected at once) and
campaigns again. When leadership is lost (the lock could not be extended)
COMMAND gets SIGTERM, then SIGKILL after --grace or before the lock can
expire, whichever is first, and syncguard campaigns again. Without a
terminal COMMAND runs in a process group of its own, which gets the
signals, and what COMMAND leaves running in it when it exits is stopped the
same way before the term is resigned. SIGINT, SIGTERM or SIGHUP stops
COMMAND the same way, resigns and exits 0.

Compared: 'syncguard run --wait forever' runs COMMAND once, as the lock's
holder, and exits with its status; 'consul lock' also re-runs nothing and
gives no fence. Use elect for a daemon that must always run somewhere.`)
	if err != nil {
		return err
	}
	if key == "" {
		return usageErr("--key is required")
	}
	if len(command) == 0 {
		return usageErr("no command given: syncguard elect --key KEY [flags] -- COMMAND [ARG...]")
	}
	if !envNameRE.MatchString(fenceEnv) || fenceEnv == keyEnv {
		return usageErr("--fence-env %q is not a usable variable name", fenceEnv)
	}
	path, err := exec.LookPath(command[0])
	if err != nil {
		return startError(command[0], err)
	}
	if identity == "" {
		identity = defaultIdentity(command[0])
	}
	db, b, err := a.backend()
	if err != nil {
		return err
	}
	defer db.Close()
	e, err := election.New(b, key, &election.Options{Identity: identity, TTL: ttl, Recampaign: again})
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	// COMMAND gets a process group of its own, which the signals reach
	// (its children too), unless syncguard has a terminal: then it stays
	// in the terminal's foreground group (^Z, ^C and a hang-up reach it as
	// they reach syncguard), as with run --foreground.
	grouped := !hasControllingTTY()
	return e.Run(ctx, func(ctx context.Context, term *election.Term) error {
		a.notef("elected leader of %s as %s, term %s: starting %s", displayKey(key), identity, term.Fence(), command[0])
		cmd := exec.CommandContext(ctx, path, command[1:]...)
		cmd.Args[0] = command[0]
		cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, a.stdout, a.stderr
		n, _ := term.Fence().Int64()
		cmd.Env = append(os.Environ(), fenceEnv+"="+string(term.Fence()), fenceEnv+numSuffix+"="+strconv.FormatInt(n, 10), keyEnv+"="+key)
		send := func(sig syscall.Signal) {
			if grouped {
				signalGroup(cmd.Process.Pid, sig)
			} else {
				_ = cmd.Process.Signal(sig)
			}
		}
		if grouped {
			cmd.SysProcAttr = groupAttr()
		}
		// SIGKILL after --grace; after a loss, before the lock can expire
		// at the latest.
		graceNow := func() time.Duration {
			if term.Err() != nil && !errors.Is(term.Err(), election.ErrResigned) {
				return max(min(grace, time.Until(term.Lease().HeldUntil())), 0)
			}
			return grace
		}
		exited := make(chan struct{})
		cmd.Cancel = func() error {
			d := graceNow()
			go func() {
				t := time.NewTimer(d)
				defer t.Stop()
				select {
				case <-t.C:
					send(syscall.SIGKILL)
				case <-exited:
				}
			}()
			send(syscall.SIGTERM)
			return nil
		}
		err := cmd.Run()
		close(exited)
		// What COMMAND left running in its group is stopped before the
		// term is resigned: no two leaders' processes overlap.
		if grouped && cmd.Process != nil && signalGroup(cmd.Process.Pid, 0) {
			a.notef("%s exited; stopping what is left of its process group: SIGTERM now, SIGKILL after %v", command[0], fmtDuration(graceNow()))
			stopGroup(cmd.Process.Pid, graceNow())
		}
		if cause := term.Err(); cause != nil {
			a.notef("term %s ended (%v): %s stopped (%v)", term.Fence(), cause, command[0], err)
		} else {
			a.notef("%s exited (%v): resigning term %s, campaigning again in %s", command[0], errOrOK(err), term.Fence(), fmtDuration(again))
		}
		return nil
	})
}

// stopGroup ends the members of process group pgid: SIGTERM, then SIGKILL
// after d (or once none is left).
func stopGroup(pgid int, d time.Duration) {
	signalGroup(pgid, syscall.SIGTERM)
	for end := time.Now().Add(d); signalGroup(pgid, 0) && time.Now().Before(end); {
		reapGroup(pgid) // members that became our children (syncguard as PID 1)
		time.Sleep(10 * time.Millisecond)
	}
	signalGroup(pgid, syscall.SIGKILL)
	reapGroup(pgid)
}

func errOrOK(err error) any {
	if err == nil {
		return "status 0"
	}
	return err
}
