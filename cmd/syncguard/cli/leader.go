package cli

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
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
	key, err := a.parseKey(fs, args, `
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
	if *interval <= 0 {
		return usageErr("--interval must be positive")
	}
	db, b, err := a.backend()
	if err != nil {
		return err
	}
	defer db.Close()
	e, err := election.New(b, key, &election.Options{PollInterval: *interval})
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
	switch {
	case line && l == nil:
		fmt.Fprintf(a.stdout, "%s no leader\n", stamp(time.Now()))
	case line:
		fmt.Fprintf(a.stdout, "%s leader %s term %s\n", stamp(time.Now()), identityText(l.Identity), l.Term)
	case l == nil:
		fmt.Fprintln(a.stdout, "no leader")
	default:
		w := table(a.stdout)
		fmt.Fprintf(w, "leader\t%s\nterm\t%s\nsince\t%s\nexpires\t%s\n", identityText(l.Identity), l.Term, stamp(l.Since), stamp(l.ExpiresAt))
		_ = w.Flush()
	}
}

func identityText(id string) string {
	if id == "" {
		return "(no identity stored)"
	}
	return displayKey(id)
}
