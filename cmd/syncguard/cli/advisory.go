package cli

import (
	"bufio"
	"cmp"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
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

// loadRegistry reads the Markdown tables of path that have a "Lock ID"
// column and declares each fixed id in a Registry.
func (a *app) loadRegistry(path string) (*advisory.Registry, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, usageErr("--registry: %v", err)
	}
	defer f.Close()
	reg := advisory.MustNewRegistry("syncguard-cli")
	var header []string // lower-cased column names of the current table, nil outside one
	names := map[string]int{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	line := 0
	for sc.Scan() {
		line++
		cells, ok := tableRow(sc.Text())
		switch {
		case !ok:
			header = nil
			continue
		case header == nil:
			header = make([]string, len(cells))
			for i, c := range cells {
				header[i] = strings.ToLower(strings.Trim(c, "`* "))
			}
			continue
		case strings.Trim(strings.Join(cells, ""), "-: ") == "": // the separator row
			continue
		}
		col := func(name string) string {
			if i := slices.Index(header, name); i >= 0 && i < len(cells) {
				return strings.TrimSpace(strings.Trim(cells[i], "`"))
			}
			return ""
		}
		idText := col("lock id")
		if idText == "" {
			continue
		}
		key, ok := parseLockID(idText)
		if !ok {
			a.notef("--registry %s:%d: lock id %q is neither an integer nor a pair (k1, k2); skipped", path, line, idText)
			continue
		}
		purpose := col("purpose")
		name := cmp.Or(col("name"), strings.Trim(col("component")+": "+purpose, ": "), "lock "+idText)
		if names[name]++; names[name] > 1 {
			name = fmt.Sprintf("%s (%d)", name, names[name])
		}
		if purpose == "" {
			purpose = "named in " + path
		}
		kind := advisory.Session
		if strings.Contains(strings.ToLower(col("lock type")), "transaction") {
			kind = advisory.Transaction
		}
		if _, err := reg.Declare(advisory.Decl{Name: name, Kind: kind, Purpose: purpose, ID: key, Source: path}); err != nil {
			_, _, msg := describe(err)
			a.notef("--registry %s:%d: %s; skipped", path, line, msg)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, usageErr("--registry: %v", err)
	}
	return reg, nil
}

// tableRow splits a Markdown table row "| a | b |" into its cells,
// honouring escaped pipes (\|).
func tableRow(s string) ([]string, bool) {
	s = strings.TrimSpace(s)
	if !strings.HasPrefix(s, "|") {
		return nil, false
	}
	s = strings.TrimSuffix(strings.TrimPrefix(s, "|"), "|")
	var cells []string
	var cur strings.Builder
	for i := 0; i < len(s); i++ {
		switch {
		case s[i] == '\\' && i+1 < len(s) && s[i+1] == '|':
			cur.WriteByte('|')
			i++
		case s[i] == '|':
			cells = append(cells, strings.TrimSpace(cur.String()))
			cur.Reset()
		default:
			cur.WriteByte(s[i])
		}
	}
	return append(cells, strings.TrimSpace(cur.String())), true
}

// parseLockID reads "42424242" (the bigint form) or "(1, 2)" (two keys).
func parseLockID(s string) (advisory.Key, bool) {
	s = strings.TrimSpace(s)
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return advisory.ID(n), true
	}
	s = strings.TrimSuffix(strings.TrimPrefix(s, "("), ")")
	k1s, k2s, ok := strings.Cut(s, ",")
	if !ok {
		return advisory.Key{}, false
	}
	k1, err1 := strconv.ParseInt(strings.TrimSpace(k1s), 10, 32)
	k2, err2 := strconv.ParseInt(strings.TrimSpace(k2s), 10, 32)
	if err1 != nil || err2 != nil {
		return advisory.Key{}, false
	}
	return advisory.Pair(int32(k1), int32(k2)), true
}
