package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/syncguard/syncguard-go/internal/kit"
	"github.com/syncguard/syncguard-go/internal/rules"
	"github.com/syncguard/syncguard-go/multilock"
	"github.com/syncguard/syncguard-go/syncguard"
)

const (
	defaultFenceEnv = "SYNCGUARD_FENCE"
	keyEnv          = "SYNCGUARD_KEY"
	// numSuffix names the variable with the fence as a plain decimal
	// number: $SYNCGUARD_FENCE_NUM.
	numSuffix = "_NUM"
	// pollDelay is the base delay between attempts on a busy lock, and
	// after a transient error (with equal jitter: 125 to 250 ms): what finds
	// a release where no notification comes (PgBouncer in transaction mode).
	pollDelay = 250 * time.Millisecond

	defaultTTL   = 30 * time.Second
	defaultWait  = 5 * time.Second
	defaultGrace = 10 * time.Second
	minTTL       = time.Second
	maxTTL       = 24 * time.Hour
	maxWait      = 365 * 24 * time.Hour
	maxGrace     = 24 * time.Hour
)

// runOpts are run's settings, and elect's for each term.
type runOpts struct {
	key, fenceEnv, identity string
	ttl, wait, grace, again time.Duration // again: elect's --recampaign
	busyExit                int
	foreground              bool
	verbose, quiet          bool
	command                 []string
	keys                    []string // run's --key, repeated: a set (multilock)
	permits                 int      // run --permits: a permit of a semaphore
	shared, exclusive       bool     // run -s, -x: a read-write lock
	env                     []string // COMMAND's variables of the kind (slot, mode, fences)
	shell                   string   // -c: the command line for /bin/sh -c
	path                    string   // COMMAND resolved in $PATH
}

const runHelp = `
KEY is the first argument (or --key KEY); flags go before or after it.
COMMAND is the first argument after KEY that is not a flag, or what
follows "--"; -c 'COMMAND LINE' runs a command line through /bin/sh -c
instead (like flock -c). One-letter flags can be bundled: -nq is -n -q,
-w5 is -w 5. A KEY that begins with "-" needs --key.

Acquires the lock on KEY, waiting for up to --wait while it is busy (in
its queue: woken when the holder releases it, or at the holder's expiry;
polling where no notification reaches it, as behind PgBouncer in
transaction mode); runs COMMAND with the fence in $SYNCGUARD_FENCE (15
digits, zero-padded) and $SYNCGUARD_FENCE_NUM (plain decimal; see
--fence-env) and the key in $SYNCGUARD_KEY; extends the lease while COMMAND
runs; releases the lock when COMMAND and every process it started have
exited; and exits with COMMAND's status (128+N if signal N killed it).

Other kinds of lock, each independent of KEY's mutex (tables: setup --all):
--permits N, one of N permits of a semaphore on KEY, adds $SYNCGUARD_SLOT
and $SYNCGUARD_FENCE_KEY (KEY#SLOT: the fence's counter). -s/--shared and
-x/--exclusive, a read-write lock on KEY, add $SYNCGUARD_MODE (shared,
exclusive); a reader's fence is the last writer's. --key repeated (or KEY
and --key): all the keys at once; $SYNCGUARD_FENCES is each key's fence (a
JSON object), $SYNCGUARD_FENCE the largest, $SYNCGUARD_KEY the set.

The lock covers COMMAND's whole process tree: on Linux, background and
orphaned descendants too (run waits for all of them), and a kill -9 of
syncguard takes the tree down with it. SIGINT, SIGTERM, SIGHUP, SIGQUIT,
SIGUSR1 and SIGUSR2 are forwarded to the tree; a signal syncguard was
started with ignored (nohup) stays ignored for the tree.

If the lock is lost while COMMAND runs, the tree gets SIGTERM, then SIGKILL
after --grace, or earlier: always before the lock's last confirmed expiry
(run says when it shortens --grace); syncguard then exits 76. If the lock
stays busy for all of --wait, COMMAND does not run and syncguard exits 75
(or --busy-exit). While the release of the lock waits for the database, a
SIGINT or SIGTERM ends syncguard at once (the lock then expires by its TTL).

Durations are seconds (10, 2.5) or Go durations (500ms, 1m30s). Every flag
but --key can be set in the environment ($SYNCGUARD_WAIT, ...).

Exit statuses: COMMAND's own; 75 lock busy (--busy-exit); 76 lock lost;
64 usage or configuration; 69 database unavailable; 70 internal; 77
credentials or privileges refused; 126 COMMAND not executable; 127
COMMAND not found; 128+N syncguard got signal N while
waiting or releasing, or COMMAND stopped on signal N (SIGTTIN: it read the
terminal; use --foreground).

Example (crontab): never two reports at once across the fleet
  */5 * * * * syncguard run -nq jobs:report -- /opt/report.sh
  */5 * * * * syncguard run -nq jobs:report -c '/opt/report.sh >> /var/log/report.log 2>&1'`

func (a *app) cmdRun(args []string) error {
	fs := a.flagSet("run")
	o := runOpts{busyExit: ExitBusy}
	fs.Func("key", "the lock's `KEY` (required; no environment variable: $SYNCGUARD_KEY is what COMMAND gets); repeated, several keys held at once, all or none", func(s string) error {
		o.keys = append(o.keys, s)
		return nil
	})
	kindFlags(fs, &o)
	durationVar(fs, &o.ttl, "ttl", defaultTTL, minTTL, maxTTL,
		"lease time to live (`DURATION`, 1s to 24h); extended every ttl/3 while COMMAND runs, it bounds how long the lock outlives a killed syncguard")
	wait := &durationFlag{d: &o.wait, min: 0, max: maxWait, forever: true}
	o.wait = defaultWait
	fs.Var(wait, "wait", "how long to keep trying while the lock is busy (`DURATION`); 0 tries once; forever waits without limit")
	fs.Var(wait, "w", "short for --wait (`SECONDS`)")
	fs.BoolFunc("n", "do not wait: short for --wait 0", func(s string) error {
		n, err := strconv.ParseBool(s)
		if n {
			o.wait = 0
		}
		return err
	})
	busyExit := func(s string) error {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 0 || n > 255 {
			return fmt.Errorf("%q is not an exit status: want 0 to 255", s)
		}
		o.busyExit = n
		return nil
	}
	fs.Func("busy-exit", "exit status when the lock stays busy (`N`, 0 to 255), to tell it from COMMAND's own statuses", busyExit)
	fs.Func("E", "short for --busy-exit (`N`)", busyExit)
	fs.Lookup("busy-exit").DefValue, fs.Lookup("E").DefValue = "75", "75"
	fs.StringVar(&o.fenceEnv, "fence-env", defaultFenceEnv, "environment variable `NAME` that gives COMMAND the fence; NAME_NUM gets it as a plain decimal number")
	durationVar(fs, &o.grace, "grace", defaultGrace, 0, maxGrace,
		"after the lock is lost: time between SIGTERM and SIGKILL (`DURATION`), shortened to end before the lock's last confirmed expiry")
	fs.StringVar(&o.identity, "identity", "", "the holder identity `NAME` stored with the lock, shown by status, ls and leader (default host:pid:COMMAND)")
	fs.BoolVar(&o.foreground, "foreground", false, "run COMMAND in syncguard's process group, so it can read the terminal and gets ^C/^Z directly")
	fs.BoolVar(&o.verbose, "verbose", false, "report waiting, acquiring, forwarding and releasing on stderr")
	fs.BoolVar(&o.verbose, "v", false, "short for --verbose")
	fs.BoolVar(&o.quiet, "quiet", false, "print nothing unless the lock is lost or syncguard fails: no busy message (the exit status says it), no warnings about transient database errors")
	fs.BoolVar(&o.quiet, "q", false, "short for --quiet")
	fs.StringVar(&o.shell, "command", "", "run `COMMAND_LINE` through /bin/sh -c instead of COMMAND [ARG...] (like flock -c)")
	fs.StringVar(&o.shell, "c", "", "short for --command (`COMMAND_LINE`)")
	pos, err := a.parseCmd(fs, args, false, runHelp)
	if err != nil {
		return err
	}
	// Without --key, the first argument is KEY (as flock's FILE); flags may
	// follow it, up to COMMAND or "--".
	if len(o.keys) == 0 && len(pos) > 0 {
		o.keys = pos[:1]
		if pos, err = a.parseMore(fs, pos[1:]); err != nil {
			if errors.Is(err, errHelp) {
				a.cmdHelp(fs, runHelp)
			}
			return err
		}
	}
	o.command = pos
	if o.shell != "" {
		if len(o.command) > 0 {
			return usageErr("-c/--command and COMMAND %q both given: want one of them", o.command)
		}
		o.command = []string{"/bin/sh", "-c", o.shell}
	}
	if err := o.validate(); err != nil {
		return err
	}
	o.identity = cmp.Or(o.identity, defaultIdentity(o.command[0]))
	// Before anything is held: a command that cannot run needs no lock.
	if o.path, err = exec.LookPath(o.command[0]); err != nil {
		return startError(o.command[0], err)
	}
	db, b, err := a.backend()
	if err != nil {
		return err
	}
	defer db.Close()
	lk, err := a.runLocker(db, b, &o)
	if err != nil {
		return err
	}

	sigs := make(chan os.Signal, 32)
	signal.Notify(sigs, notifySignals(o.foreground)...)
	defer signal.Stop(sigs)

	// The lease's extends stop when ctx ends: when cmdRun returns.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ext := &extends{c: make(chan error), done: make(chan struct{})}
	lease, sig, err := a.lock(ctx, cancel, lk, &o, ext, sigs)
	if err != nil {
		return err
	}
	if sig != nil {
		return &cliError{status: 128 + signalNumber(sig), code: string(syncguard.ErrAborted),
			msg: fmt.Sprintf("got %s while waiting for the lock on %s; nothing is held and %s did not run", signalName(sig), o.label(), o.command[0])}
	}
	if o.env, err = kindEnv(lk, &o, lease); err != nil {
		close(ext.done)
		return cmp.Or(a.release(&o, lease, sigs), err)
	}
	return a.runHolding(&o, lease, ext, sigs)
}

var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

func (o *runOpts) validate() error {
	o.key = strings.Join(o.keys, "")
	_, err := rules.NormalizeKey(o.key)
	if len(o.keys) > 1 {
		o.key = multilock.Keys(o.keys...)
		_, err = multilock.ParseKeys(o.key)
	}
	switch {
	case o.key == "":
		return usageErr("no KEY given: syncguard run KEY [flags] -- COMMAND [ARG...] (or --key KEY)")
	case len(o.kinds()) > 1:
		return usageErr("%s: one kind of lock at a time: --permits N (a semaphore), -s/--shared or -x/--exclusive (a read-write lock), or several keys", strings.Join(o.kinds(), " and "))
	case err != nil:
		return err
	case len(o.command) == 0:
		return usageErr("no command given: syncguard run KEY [flags] -- COMMAND [ARG...], or -c 'COMMAND LINE'")
	case !envNameRE.MatchString(o.fenceEnv) || slices.Contains(kindVars, o.fenceEnv) || slices.Contains(kindVars, o.fenceEnv+numSuffix):
		return usageErr("--fence-env %q is not a usable variable name (letters, digits and _, not starting with a digit; not %s)", o.fenceEnv, strings.Join(kindVars, ", "))
	}
	return nil
}

// lock acquires the lease while watching for signals: one that ends the
// wait cancels ctx, and lock returns it (nothing is held then).
func (a *app) lock(ctx context.Context, cancel context.CancelFunc, b runLocker, o *runOpts, ext *extends, sigs <-chan os.Signal) (*syncguard.Lease, os.Signal, error) {
	var lease *syncguard.Lease
	var err error
	done := make(chan struct{})
	go func() {
		defer close(done)
		lease, err = a.acquire(ctx, b, o, ext)
	}()
	for {
		select {
		case s := <-sigs:
			if !abortsWait(s) {
				continue
			}
			cancel()
			close(ext.done) // nobody listens to the lease's extends
			if <-done; lease != nil {
				lease.Close()
			}
			return nil, s, nil
		case <-done:
			return lease, nil, err
		}
	}
}

// acquire takes the lock (of any kind: b) with the library's Lock, which
// waits for up to --wait (forever: until ctx ends) in b's queue, retrying
// after errors every 125 to 250 ms, rides an outage out, and says how the
// wait ended: busy (75) once an attempt got an answer, else the outage's
// last failure (69), or busy when --wait cut every attempt short (an
// attempt that --wait cut says nothing about the server: docs/errors.md).
// Each attempt is bounded by --timeout. The lease extends itself
// (AutoExtend), reporting to ext. acquire reports the outage (one warning)
// and, with --verbose, the wait.
func (a *app) acquire(ctx context.Context, b runLocker, o *runOpts, ext *extends) (*syncguard.Lease, error) {
	start := time.Now()
	remaining := func() time.Duration {
		if o.wait == Forever {
			return Forever
		}
		return o.wait - time.Since(start)
	}
	// The LISTEN connection the waiting may have opened is of no use once
	// the wait is over; the Backend stays usable. In the background: its
	// goroutine may be in a ping, which must not delay COMMAND.
	defer func() { go b.Close() }()
	announced, failed := false, false
	var outage time.Time // the first failure since the last answer
	onAttempt := func(r syncguard.AcquireResult, err error) {
		switch {
		case err == nil:
			if !outage.IsZero() && !o.quiet {
				acquired := map[bool]string{true: "; acquired " + o.label()}[r.OK]
				a.notef("PostgreSQL answers again after %v%s", short(time.Since(outage)), acquired)
			}
			outage = time.Time{}
			if !r.OK && o.verbose && !announced && o.wait > 0 {
				announced = true
				a.notef("%s is busy (%s); waiting %s", o.label(), a.holder(b, o), retryingFor(remaining()))
			}
		case o.wait > 0 && (ctx.Err() != nil || remaining() <= 0), !syncguard.CodeOf(err).Retryable():
			// Cut short by the end of --wait (or a signal): no answer yet.
		case outage.IsZero():
			failed, outage = true, time.Now()
			if left := remaining(); !o.quiet && o.wait > 0 && left > 0 {
				_, code, msg := describe(err)
				a.errorf("warning", "cannot acquire %s yet (%s: %s); retrying %s", o.label(), code, trim(msg, 160), retryingFor(left))
			}
		}
	}
	// --wait 0: one attempt, bounded by --timeout alone.
	wait := syncguard.AcquisitionOptions{MaxRetries: -1, Timeout: -1}
	if o.wait > 0 {
		wait = syncguard.AcquisitionOptions{RetryDelay: pollDelay, Backoff: "fixed", Jitter: "equal", Timeout: o.wait}
		if o.wait == Forever {
			wait.Timeout = -1 // until a signal
		}
	}
	lease, err := syncguard.Lock(ctx, &bounded{runLocker: b, timeout: a.timeout, extendFailed: ext.send}, o.key, &syncguard.LockOptions{
		TTL: o.ttl, AutoExtend: true, Acquisition: wait, ReleaseTimeout: a.timeout, Identity: o.identity,
		OnAttempt: onAttempt,
		OnExtend:  func(syncguard.ExtendResult) { ext.send(nil) },
		// runHolding releases explicitly and reports the error itself, and
		// prints its own lines about failed extends.
		OnReleaseError: func(error, syncguard.ReleaseErrorInfo) {},
		Logger:         slog.New(slog.DiscardHandler),
	})
	code := syncguard.CodeOf(err)
	switch {
	case err == nil:
		if o.verbose {
			a.notef("acquired %s with fence %s (ttl %v, after %v)", o.label(), lease.Fence(), fmtDuration(o.ttl), time.Since(start).Round(time.Millisecond))
		}
		return lease, nil
	case ctx.Err() != nil, code != syncguard.ErrAcquisitionTimeout && code != syncguard.ErrNetworkTimeout && code != syncguard.ErrServiceUnavailable:
		return nil, err // a signal, or an error Lock does not ride out
	case code != syncguard.ErrAcquisitionTimeout && failed:
		// No answer, and an attempt failed by itself: that failure (after
		// a wait, Lock's error wraps the last one).
		if e := (*syncguard.Error)(nil); o.wait > 0 && errors.As(err, &e) && e.Err != nil {
			return nil, e.Err
		}
		return nil, err
	}
	return nil, a.busy(b, o, time.Since(start), code != syncguard.ErrAcquisitionTimeout)
}

// bounded is the Locker run's lease goes through: it bounds each attempt
// and extend by --timeout (else by the wait's end, the lease's lifetime: all
// of it on a connection gone dark) and reports failed extends (OnExtend
// reports the confirmed ones). Its waiters are the Backend's: still queued.
type bounded struct {
	runLocker
	timeout      time.Duration
	extendFailed func(error)
}

type boundedWaiter struct {
	kit.Wait
	timeout time.Duration
	key     string
}

func (b *bounded) Queue(key, identity string, once bool) kit.Wait {
	return boundedWaiter{b.runLocker.Queue(key, identity, once), b.timeout, key}
}

func (w boundedWaiter) Attempt(ctx context.Context, ttl time.Duration) (syncguard.AcquireResult, error) {
	actx, cancel := context.WithTimeout(ctx, w.timeout)
	defer cancel()
	r, err := w.Wait.Attempt(actx, ttl)
	if err != nil && ctx.Err() == nil && actx.Err() != nil {
		// --timeout ran out, not the wait: an outage.
		err = &syncguard.Error{Op: "lock", Code: syncguard.ErrNetworkTimeout, Key: w.key, Err: err,
			Msg: "no answer from PostgreSQL within --timeout " + fmtDuration(w.timeout)}
	}
	return r, err
}

func (b *bounded) Extend(ctx context.Context, lockID string, ttl time.Duration) (syncguard.ExtendResult, error) {
	ctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	r, err := b.runLocker.Extend(ctx, lockID, ttl)
	if err != nil {
		b.extendFailed(err)
	}
	return r, err
}

func retryingFor(d time.Duration) string {
	if d == Forever {
		return "without limit (--wait forever)"
	}
	return "for up to " + short(d)
}

// trim shortens s to at most n bytes, on a word boundary, with "...".
func trim(s string, n int) string {
	s = oneLine(s)
	if len(s) <= n {
		return s
	}
	cut := strings.LastIndexByte(s[:n], ' ')
	if cut < n/2 {
		cut = n
	}
	return s[:cut] + " ..."
}

// holder describes the current holder of o.key for messages.
func (a *app) holder(b runLocker, o *runOpts) string {
	ctx, cancel := context.WithTimeout(context.Background(), min(a.timeout, 2*time.Second))
	defer cancel()
	info, err := b.LookupKey(ctx, o.key)
	if err != nil || info == nil {
		return "held by another process"
	}
	return fmt.Sprintf("held by %s with fence %s, expires in about %s", holderText(*info), info.Fence,
		short(max(time.Until(info.ExpiresAt), 0)))
}

// busy is the error when --wait ran out while the lock was busy, or while
// an attempt was still in flight without any answer yet (noAnswer).
func (a *app) busy(b runLocker, o *runOpts, waited time.Duration, noAnswer bool) error {
	e := &cliError{status: o.busyExit, code: string(syncguard.ErrAcquisitionTimeout), silent: o.quiet}
	if o.quiet {
		return e
	}
	tail := "not waiting (--wait 0)"
	if o.wait > 0 {
		tail = fmt.Sprintf("gave up after %v (--wait %v)", waited.Round(time.Millisecond), fmtDuration(o.wait))
	}
	if noAnswer {
		e.msg = fmt.Sprintf("lock busy or PostgreSQL slow: no answer yet about %s when --wait ran out (each attempt may take up to --timeout %v); %s; nothing is held",
			o.label(), fmtDuration(a.timeout), tail)
		return e
	}
	e.msg = fmt.Sprintf("lock busy: %s is %s; %s", o.label(), a.holder(b, o), tail)
	return e
}

// childEnv is COMMAND's environment (run's and elect's): syncguard's, with
// the fence, the key and extra, the kind's (replacing those of an enclosing
// syncguard run).
func childEnv(environ []string, fenceEnv, key string, fence syncguard.Fence, extra ...string) []string {
	num := strings.TrimLeft(string(fence), "0")
	if num == "" {
		num = "0"
	}
	env := withoutEnv(environ, append([]string{fenceEnv, fenceEnv + numSuffix}, kindVars...)...)
	return append(append(env, fenceEnv+"="+string(fence), fenceEnv+numSuffix+"="+num, keyEnv+"="+key), extra...)
}

// startError is the error of a COMMAND that cannot run: 127 when it is not
// found (ENOENT is fs.ErrNotExist), 126 otherwise.
func startError(name string, err error) error {
	e := &cliError{status: ExitCannotExec, code: "CommandNotExecutable", msg: fmt.Sprintf("%s: %v", name, unwrapPathErr(err))}
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
		e.status, e.code = ExitNotFound, "CommandNotFound"
	}
	return e
}

// unwrapPathErr drops the *os.PathError's "exec PATH:" prefix, which
// repeats the command's name.
func unwrapPathErr(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	var ee *exec.Error
	if errors.As(err, &ee) {
		return ee.Err
	}
	return err
}
