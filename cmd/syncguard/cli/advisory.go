package cli

import (
	"cmp"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/syncguard/syncguard-go/advisory"
	"github.com/syncguard/syncguard-go/internal/errwrap"
	"github.com/syncguard/syncguard-go/internal/rules"
	"github.com/syncguard/syncguard-go/pgxstd"
)

const advisoryHelp = `
Lists the PostgreSQL advisory locks of the current database, held and
awaited, from pg_locks and pg_stat_activity (package advisory's Locks and
Waiting): the lock id, its name when a registry file names it, whether the
session holds or waits for it, the session's pid, application and state,
how long it has waited (waiters) or how old its transaction is (holders),
the pids blocking a waiter, and whether it is a session or a transaction
lock (SCOPE: the kind the registry declares; else "session" for a holder
outside any transaction; else "unknown", as pg_locks does not say).

--registry names lock ids from a Markdown document with a table whose
header has a "Lock ID" column: the document advisory.Registry.Markdown
generates ("Lock ID | Name | ..."), or a hand-kept advisory-locks
registry ("Lock ID | Component | Purpose | ..."). Ids are written as
` + "`42424242`" + ` or ` + "`(1, 2)`" + ` for the two-key form. Only fixed ids can be named:
ids hashed from runtime values (per-resource locks) show without a name.`

func (a *app) cmdAdvisory(args []string) error {
	if len(args) == 0 || (args[0] != "ls" && args[0] != "-h" && args[0] != "--help" && args[0] != "-help") {
		return usageErr("want a subcommand: syncguard advisory ls [--waiting] [--registry FILE]")
	}
	if args[0] == "ls" {
		args = args[1:]
		a.cmd = "advisory ls"
	}
	fs := a.flagSet("advisory ls")
	waiting := fs.Bool("waiting", false, "list only waiting requests, with the pids blocking them")
	regFile := fs.String("registry", "", "Markdown registry document `FILE` that names lock ids (see above)")
	err := a.parseNoArgs(fs, args, advisoryHelp)
	if err != nil {
		return err
	}
	var reg *advisory.Registry
	if *regFile != "" {
		if reg, err = a.loadRegistry(*regFile); err != nil {
			return err
		}
	}
	db, err := a.open()
	if err != nil {
		return err
	}
	defer db.Close()
	l, err := advisory.New(db, &advisory.Config{Registry: reg, Dialect: pgxstd.Dialect})
	if err != nil {
		return err
	}
	ctx, cancel := a.ctx()
	defer cancel()
	var locks []advisory.Entry
	if *waiting {
		locks, err = l.Waiting(ctx)
	} else {
		locks, err = l.Locks(ctx)
	}
	if err != nil {
		return err
	}
	var nowMs int64 // the server's time, as every syncguard statement reads it
	if err := db.QueryRowContext(ctx, `SELECT `+rules.NowMsSQL).Scan(&nowMs); err != nil {
		return errwrap.Wrap(ctx, "serverTime", pgxstd.Dialect, err)
	}
	now := time.UnixMilli(nowMs)

	if a.json {
		out := []map[string]any{}
		for _, li := range locks {
			m := map[string]any{
				"lock": lockText(li.Key), "name": li.Name, "granted": li.Granted, "mode": li.Mode, "pid": li.PID,
				"blockedBy": append([]int{}, li.BlockedBy...), "applicationName": li.ApplicationName, "state": li.State,
				"waitStart": optTime(li.WaitStart), "xactStart": optTime(li.XactStart), "queryStart": optTime(li.QueryStart),
				"scope": lockScope(li),
			}
			if id, ok := li.Key.Int64(); ok {
				// A string: JSON numbers lose 64-bit precision in many
				// decoders (jq, JavaScript).
				m["id"] = strconv.FormatInt(id, 10)
			} else if k1, k2, ok := li.Key.Pair(); ok {
				m["pair"] = []int32{k1, k2}
			}
			out = append(out, m)
		}
		return writeJSON(a.stdout, map[string]any{"serverTime": jsonTime(now), "locks": out})
	}
	if len(locks) == 0 {
		fmt.Fprintln(a.stdout, map[bool]string{false: "no advisory locks held or awaited", true: "no session is waiting for an advisory lock"}[*waiting])
		return nil
	}
	w := table(a.stdout)
	fmt.Fprintln(w, "LOCK\tNAME\tSTATE\tSCOPE\tPID\tSINCE\tBLOCKED BY\tAPPLICATION\tSESSION")
	for _, li := range locks {
		state, since := "held", "-"
		if !li.Granted {
			state = "waiting"
			if t := cmp.Or(li.WaitStart, li.QueryStart); !t.IsZero() {
				since = "waiting " + short(max(now.Sub(t), 0))
			}
		} else if !li.XactStart.IsZero() {
			since = "xact " + short(max(now.Sub(li.XactStart), 0))
		}
		if li.Mode == "ShareLock" {
			state += " (shared)"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", lockText(li.Key), orDash(li.Name), state, lockScope(li), li.PID, since, orDash(joinInts(li.BlockedBy)),
			orDash(li.ApplicationName), orDash(li.State))
	}
	return w.Flush()
}

// lockScope tells session locks from transaction locks, which pg_locks
// does not: the kind the registry declares for the id; else "session" for
// a holder outside any transaction (only a session lock outlives one);
// else "unknown".
func lockScope(li advisory.Entry) string {
	if d := li.Key.Declared(); d != nil {
		switch d.Kind() {
		case advisory.Session:
			return "session"
		case advisory.Transaction:
			return "transaction"
		}
	}
	if li.Granted && li.PID != 0 && li.XactStart.IsZero() && li.State != "" {
		return "session"
	}
	return "unknown"
}

func lockText(k advisory.Key) string {
	if k1, k2, ok := k.Pair(); ok {
		return fmt.Sprintf("(%d,%d)", k1, k2)
	}
	id, _ := k.Int64()
	return strconv.FormatInt(id, 10)
}

func optTime(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return jsonTime(t)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// loadRegistry declares the fixed ids that path's Markdown tables name
// (advisory.Registry.DeclareMarkdown).
func (a *app) loadRegistry(path string) (*advisory.Registry, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, usageErr("--registry: %v", err)
	}
	defer f.Close()
	reg := advisory.MustNewRegistry("syncguard-cli")
	if err := reg.DeclareMarkdown(f, path, func(line int, err error) {
		_, _, msg := describe(err)
		a.notef("--registry %s:%d: %s; skipped", path, line, msg)
	}); err != nil {
		return nil, usageErr("--registry: %v", err)
	}
	return reg, nil
}
