package cli

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strings"
	"time"

	"github.com/syncguard/syncguard-go/internal/rules"
	"github.com/syncguard/syncguard-go/syncguard"
)

const (
	defaultFenceEnv = "SYNCGUARD_FENCE"
	keyEnv          = "SYNCGUARD_KEY"
	// pollDelay is the base delay between attempts on a busy lock (fixed,
	// with equal jitter: 125 to 250 ms). A contended attempt reads one
	// index entry and writes nothing, so polling is cheap, and a short
	// delay keeps hand-offs quick.
	pollDelay = 250 * time.Millisecond
	minTTL    = time.Second
)

type runOpts struct {
	key, fenceEnv    string
	ttl, wait, grace time.Duration
	foreground       bool
	verbose, quiet   bool
	command          []string
	normKey          string
}

const runHelp = `
Acquires the lock on KEY (retrying for up to --wait when it is busy), runs
COMMAND with the fence in $SYNCGUARD_FENCE (see --fence-env) and the key in
$SYNCGUARD_KEY, extends the lease while COMMAND runs, releases the lock when
COMMAND exits, and exits with COMMAND's status (128+N if a signal N killed
it).

SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 are forwarded to
COMMAND's process group. If the lock is lost while COMMAND runs (an extend
finds it gone, or the database stays unreachable until the lease's
guaranteed lifetime runs out), COMMAND's process group gets SIGTERM, then
SIGKILL after --grace, and syncguard exits 76. If the lock stays busy for
all of --wait, syncguard exits 75 with a one-line reason and COMMAND does
not run. The lock is released on every path.

Exit statuses: COMMAND's own; 75 lock busy; 76 lock lost; 64 usage;
69 database unavailable; 70 internal; 126 COMMAND not executable;
127 COMMAND not found; 128+N syncguard got signal N while waiting.

Example (crontab): never two reports at once across the fleet
  */5 * * * * syncguard run --key jobs:report --wait 0 --quiet -- /opt/report.sh`

func (a *app) cmdRun(args []string) error {
	fs := a.flagSet("run")
	var o runOpts
	fs.StringVar(&o.key, "key", "", "the lock's `KEY` (required)")
	fs.DurationVar(&o.ttl, "ttl", 30*time.Second, "lease time to live, at least 1s; extended every ttl/3 while COMMAND runs, so it bounds how long the lock outlives a killed syncguard")
	fs.DurationVar(&o.wait, "wait", 5*time.Second, "how long to keep trying while the lock is busy; 0 tries once")
	fs.StringVar(&o.fenceEnv, "fence-env", defaultFenceEnv, "environment variable `NAME` that gives COMMAND the fence")
	fs.DurationVar(&o.grace, "grace", 10*time.Second, "after the lock is lost: time between SIGTERM and SIGKILL")
	fs.BoolVar(&o.foreground, "foreground", false, "run COMMAND in syncguard's process group, so it can read the terminal and gets ^C/^Z directly; only COMMAND's own process is signalled then")
	fs.BoolVar(&o.verbose, "verbose", false, "report waiting, acquiring and releasing on stderr")
	fs.BoolVar(&o.verbose, "v", false, "short for --verbose")
	fs.BoolVar(&o.quiet, "quiet", false, "print nothing when the lock is busy (the exit status 75 still says so)")
	fs.BoolVar(&o.quiet, "q", false, "short for --quiet")
	command, err := a.parse(fs, args, false)
	if errors.Is(err, errHelp) {
		a.cmdHelp(fs, runHelp)
	}
	if err != nil {
		return err
	}
	o.command = command
	if err := o.validate(); err != nil {
		return err
	}
	db, b, err := a.backend()
	if err != nil {
		return err
	}
	defer db.Close()

	sigs := make(chan os.Signal, 32)
	signal.Notify(sigs, notifySignals(o.foreground)...)
	defer signal.Stop(sigs)

	lease, stop, sig, err := a.lock(b, &o, sigs)
	if err != nil {
		return err
	}
	if sig != nil {
		return &cliError{status: 128 + signalNumber(sig), code: string(syncguard.CodeAborted),
			msg: fmt.Sprintf("got %s while waiting for the lock on %s; nothing is held and %s did not run", signalName(sig), displayKey(o.key), o.command[0])}
	}
	defer stop()
	return a.runHolding(&o, lease, sigs)
}

func (o *runOpts) validate() error {
	if o.key == "" {
		return usageErr("--key is required")
	}
	norm, err := rules.NormalizeKey(o.key)
	if err != nil {
		return err
	}
	o.normKey = norm
	if len(o.command) == 0 {
		return usageErr("no command given: syncguard run --key KEY [flags] -- COMMAND [ARG...]")
	}
	if o.ttl < minTTL {
		return usageErr("--ttl must be at least %v, got %v", minTTL, o.ttl)
	}
	if o.wait < 0 || o.grace < 0 {
		return usageErr("--wait and --grace must not be negative")
	}
	if o.fenceEnv == "" || strings.ContainsAny(o.fenceEnv, "=\x00") || o.fenceEnv == keyEnv {
		return usageErr("--fence-env %q is not a usable variable name (non-empty, no '=', not %s)", o.fenceEnv, keyEnv)
	}
	return nil
}

func (a *app) lockOptions(o *runOpts, timeout time.Duration, retries int) *syncguard.LockOptions {
	return &syncguard.LockOptions{
		TTL:        o.ttl,
		AutoExtend: true,
		Acquisition: syncguard.AcquisitionOptions{
			MaxRetries: retries, RetryDelay: pollDelay, Backoff: "fixed",
			Jitter: "equal", Timeout: timeout,
		},
		ReleaseTimeout: a.timeout,
		// runHolding releases explicitly and reports the error itself.
		OnReleaseError: func(error, syncguard.ReleaseErrorInfo) {},
		Logger:         a.logger(),
	}
}

// lock acquires the lease while watching for signals. It returns the
// signal that ended the wait, if any (nothing is held then), and stop,
// which ends the context the lease's auto-extension runs under: call it
// after the release.
func (a *app) lock(b *syncguard.Backend, o *runOpts, sigs <-chan os.Signal) (*syncguard.Lease, func(), os.Signal, error) {
	ctx, cancel := context.WithCancel(context.Background())
	type result struct {
		lease *syncguard.Lease
		err   error
	}
	resc := make(chan result, 1)
	go func() {
		l, err := a.acquire(ctx, b, o)
		resc <- result{l, err}
	}()
	// The lease's auto-extension runs under ctx, so ctx cannot carry a
	// deadline; bound a database that stops answering here instead.
	limit := time.NewTimer(o.wait + a.timeout)
	defer limit.Stop()
	for {
		select {
		case <-limit.C:
			cancel()
			if r := <-resc; r.lease != nil {
				r.lease.Close()
			}
			return nil, nil, nil, &cliError{status: ExitUnavailable, code: string(syncguard.CodeNetworkTimeout),
				msg: fmt.Sprintf("no answer from PostgreSQL within --wait %v + --timeout %v; nothing is held", o.wait, a.timeout)}
		case s := <-sigs:
			if !abortsWait(s) {
				continue
			}
			cancel()
			if r := <-resc; r.lease != nil {
				r.lease.Close()
			}
			return nil, nil, s, nil
		case r := <-resc:
			if r.err != nil {
				cancel()
				return nil, nil, nil, r.err
			}
			return r.lease, cancel, nil, nil
		}
	}
}

// acquire makes one attempt, then retries until --wait runs out. Contention
// is retried by the library's helper; transient database errors
// (ServiceUnavailable, NetworkTimeout, RateLimited) are retried here while
// time remains.
func (a *app) acquire(ctx context.Context, b *syncguard.Backend, o *runOpts) (*syncguard.Lease, error) {
	start := time.Now()
	deadline := start.Add(o.wait)
	lease, err := syncguard.Lock(ctx, b, o.key, a.lockOptions(o, time.Hour, -1))
	announced, reported := false, false
	for err != nil {
		remaining := time.Until(deadline)
		var se *syncguard.Error
		switch {
		case ctx.Err() != nil:
			return nil, err
		case syncguard.CodeOf(err) == syncguard.CodeAcquisitionTimeout:
			if remaining <= 0 {
				return nil, a.busy(b, o, time.Since(start))
			}
			if o.verbose && !announced {
				announced = true
				a.notef("%s is busy (%s); waiting up to %v", displayKey(o.key), a.holder(b, o), remaining.Round(time.Millisecond))
			}
		case errors.As(err, &se) && se.Retryable() && remaining > 0:
			if !reported {
				reported = true
				_, _, msg := describe(se)
				a.errorf(string(se.Code), "acquire failed, retrying for up to %v: %s", remaining.Round(time.Millisecond), msg)
			}
			t := time.NewTimer(min(pollDelay, remaining))
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return nil, err
			}
			remaining = time.Until(deadline)
		default:
			return nil, err
		}
		lease, err = syncguard.Lock(ctx, b, o.key, a.lockOptions(o, max(remaining, time.Millisecond), math.MaxInt32))
	}
	if o.verbose {
		a.notef("acquired %s with fence %s (ttl %v, after %v)", displayKey(o.key), lease.Fence(), o.ttl, time.Since(start).Round(time.Millisecond))
	}
	return lease, nil
}

// holder describes the current holder of o.key for messages.
func (a *app) holder(b *syncguard.Backend, o *runOpts) string {
	ctx, cancel := context.WithTimeout(context.Background(), min(a.timeout, 2*time.Second))
	defer cancel()
	info, err := b.LookupKey(ctx, o.key)
	if err != nil || info == nil {
		return "held by another process"
	}
	return fmt.Sprintf("held by lock#%s with fence %s, expires in about %s", info.LockIDHash, info.Fence,
		short(max(time.Until(info.ExpiresAt), 0)))
}

func (a *app) busy(b *syncguard.Backend, o *runOpts, waited time.Duration) error {
	e := &cliError{status: ExitBusy, code: string(syncguard.CodeAcquisitionTimeout), silent: o.quiet}
	if o.quiet {
		return e
	}
	tail := "not waiting (--wait 0)"
	if o.wait > 0 {
		tail = fmt.Sprintf("gave up after %v (--wait %v)", waited.Round(time.Millisecond), o.wait)
	}
	e.msg = fmt.Sprintf("lock busy: %s is %s; %s", displayKey(o.key), a.holder(b, o), tail)
	return e
}

// child is the running COMMAND.
type child struct {
	cmd   *exec.Cmd
	group bool // COMMAND leads its own process group, which is signalled as a whole
}

// runHolding runs the command while lease is held, then releases it.
func (a *app) runHolding(o *runOpts, lease *syncguard.Lease, sigs <-chan os.Signal) error {
	released := false
	release := func() {
		if released {
			return
		}
		released = true
		ctx, cancel := context.WithTimeout(context.Background(), a.timeout)
		defer cancel()
		res, err := lease.Release(ctx)
		switch {
		case err != nil:
			_, code, msg := describe(err)
			a.errorf(code, "could not release the lock on %s; it expires by itself within %v: %s", displayKey(o.key), o.ttl, msg)
		case o.verbose && res.OK:
			a.notef("released %s (fence %s)", displayKey(o.key), lease.Fence())
		}
	}
	defer release()

	cmd := exec.Command(o.command[0], o.command[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = a.stdin, a.stdout, a.stderr
	cmd.Env = append(a.environ(), o.fenceEnv+"="+string(lease.Fence()), keyEnv+"="+o.key)
	cmd.SysProcAttr = sysProcAttr(o.foreground)
	c := &child{cmd: cmd, group: !o.foreground}

	startErr := make(chan error, 1)
	done := make(chan struct{})
	go func() {
		// Pdeathsig (Linux) is tied to the thread that started the child:
		// keep this goroutine on its thread for the child's whole life.
		runtime.LockOSThread()
		if err := cmd.Start(); err != nil {
			startErr <- err
			return
		}
		startErr <- nil
		_ = cmd.Wait() // the status is in cmd.ProcessState
		close(done)
	}()
	if err := <-startErr; err != nil {
		return startError(o.command[0], err)
	}
	running := time.Now()
	if o.verbose {
		a.notef("running %s (pid %d)", o.command[0], cmd.Process.Pid)
	}

	var (
		lost     error
		killC    <-chan time.Time
		graceEnd time.Time
	)
	leaseDone := lease.Done()
loop:
	for {
		select {
		case s := <-sigs:
			switch {
			case isSuspend(s):
				c.suspend(func() {
					// Back from a stop: make sure the lock is still ours
					// before the command continues.
					ctx, cancel := context.WithTimeout(context.Background(), a.timeout)
					defer cancel()
					_, _ = lease.Extend(ctx, o.ttl)
				})
			case forwardable(s, o.foreground):
				if o.verbose {
					a.notef("forwarding %s to %s", signalName(s), o.command[0])
				}
				c.send(s)
			}
		case <-leaseDone:
			leaseDone = nil
			if err := lease.Err(); errors.Is(err, syncguard.ErrLockLost) {
				lost = err
				a.errorf("LockLost", "lost the lock on %s (%s); stopping %s: SIGTERM now, SIGKILL after %v",
					displayKey(o.key), strings.TrimPrefix(err.Error(), "syncguard: "), o.command[0], o.grace)
				c.terminate()
				graceEnd = time.Now().Add(o.grace)
				killC = time.After(o.grace)
			}
		case <-killC:
			killC = nil
			a.errorf("LockLost", "%s still running %v after SIGTERM: sending SIGKILL", o.command[0], o.grace)
			c.kill()
		case <-done:
			break loop
		}
	}
	if lost != nil && c.group {
		// The work may go on in other members of COMMAND's process group:
		// give them what is left of the grace period, then kill them.
		for c.groupAlive() && time.Now().Before(graceEnd) {
			time.Sleep(50 * time.Millisecond)
		}
		c.kill()
	}
	status := exitStatus(cmd.ProcessState)
	release()
	if lost != nil {
		return &cliError{status: ExitLost, code: "LockLost", silent: true}
	}
	if o.verbose {
		a.notef("%s exited with status %d after %v", o.command[0], status, time.Since(running).Round(time.Millisecond))
	}
	if status != 0 {
		return &cliError{status: status, silent: true}
	}
	return nil
}

func startError(name string, err error) error {
	switch {
	case errors.Is(err, exec.ErrNotFound):
		return &cliError{status: ExitNotFound, code: "CommandNotFound", msg: fmt.Sprintf("%s: %v", name, err)}
	case errors.Is(err, fs.ErrPermission):
		return &cliError{status: ExitCannotExec, code: "CommandNotExecutable", msg: fmt.Sprintf("%s: %v", name, err)}
	default:
		return &cliError{status: ExitCannotExec, code: "CommandNotExecutable", msg: fmt.Sprintf("%s: %v", name, err)}
	}
}
