// Package cli is the syncguard command (cmd/syncguard), as a package so
// that other programs (the demo) can run it in-process or re-executing
// themselves. Its only API is Main and the exit statuses.
package cli

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/syncguard/syncguard-go/internal/rules"
	"github.com/syncguard/syncguard-go/syncguard"
)

// Exit statuses of the syncguard command. `run` otherwise exits with its
// command's status, or 128+N when the command was killed by signal N.
const (
	ExitOK          = 0
	ExitFindings    = 1  // doctor found a problem
	ExitFree        = 1  // status: the key is free (held is 0)
	ExitUsage       = 64 // EX_USAGE: bad flags or arguments, invalid key or table name, malformed DSN or no such database
	ExitUnavailable = 69 // EX_UNAVAILABLE: PostgreSQL unreachable, timed out, or out of connections
	ExitInternal    = 70 // EX_SOFTWARE: missing schema, unexpected server error, bug
	ExitBusy        = 75 // EX_TEMPFAIL: run: the lock was held by someone else for all of --wait
	ExitLost        = 76 // run: the lock was lost while the command ran; the command was stopped
	ExitNoPerm      = 77 // EX_NOPERM: PostgreSQL refused the credentials, or the role lacks a privilege
	ExitCannotExec  = 126
	ExitNotFound    = 127
)

// Main runs the syncguard command with args (the arguments after the
// program name), the process's standard streams and environment, and
// returns the exit status.
func Main(args []string) int {
	return (&app{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv, environ: os.Environ}).main(args)
}

// app is one invocation: its streams, environment and global flags.
type app struct {
	stdin          *os.File
	stdout, stderr io.Writer
	getenv         func(string) string
	environ        func() []string

	// global flags
	dsn, table, fenceTable string
	json                   bool
	timeout                time.Duration
	noPrepare              bool // true unless --no-prepare=false: see db.go
	dsnNoPrepare           bool // the connection string's default_query_exec_mode prepares nothing

	cmd string  // the command being run, for messages ("run", "advisory ls")
	db  *sql.DB // the database of backend
}

type command struct {
	name, args, summary string
	run                 func(a *app, args []string) error
}

var commands []command

func init() {
	// In init: the commands' help refers back to this table.
	commands = []command{
		{"run", "KEY [flags] -- COMMAND [ARG...]", "run COMMAND while holding the lock on KEY (also: --key KEY; -c 'COMMAND LINE' for sh -c)", (*app).cmdRun},
		{"status", "KEY", "show whether KEY is held, by whom, until when, with which fence", (*app).cmdStatus},
		{"ls", "", "list active locks, newest first", (*app).cmdLs},
		{"revoke", "KEY", "force every holder of KEY out (mutex, permits, read-write leases, sets with KEY): each lease ends as lost at its next extend; the first waiters get what they held", (*app).cmdRevoke},
		{"leader", "KEY [--watch]", "show the leader of the election KEY (identity, term), or follow it", (*app).cmdLeader},
		{"elect", "--key KEY [flags] -- COMMAND [ARG...]", "run COMMAND whenever elected leader of KEY; campaign again after it exits or loses", (*app).cmdElect},
		{"schema", "", "print the DDL of the lock tables (for migration tools)", (*app).cmdSchema},
		{"setup", "", "create the lock tables and indexes if they do not exist", (*app).cmdSetup},
		{"doctor", "", "check schema, privileges, clock, durability and pooler; say what to fix", (*app).cmdDoctor},
		{"advisory", "ls", "list PostgreSQL advisory locks held and awaited", (*app).cmdAdvisory},
		{"version", "", "print the version", (*app).cmdVersion},
	}
}

func lookupCommand(name string) *command {
	if i := slices.IndexFunc(commands, func(c command) bool { return c.name == name }); i >= 0 {
		return &commands[i]
	}
	return nil
}

func (a *app) main(args []string) int {
	a.cmd, a.timeout, a.noPrepare = "", 15*time.Second, true // the global flags' defaults
	fs := a.flagSet("")
	var version bool
	fs.BoolVar(&version, "version", false, "print the version and exit")
	rest, err := a.parse(fs, args, false)
	if errors.Is(err, errHelp) {
		a.usage(a.stdout)
		return ExitOK
	}
	if err != nil {
		return a.exit(err)
	}
	if version {
		return a.exit(a.cmdVersion(nil))
	}
	if len(rest) == 0 {
		a.usage(a.stderr)
		return ExitUsage
	}
	name := rest[0]
	switch {
	case name == "help" && len(rest) > 1 && lookupCommand(rest[1]) != nil:
		a.cmd = rest[1]
		return a.exit(lookupCommand(rest[1]).run(a, []string{"-h"}))
	case name == "help", name == "-h", name == "--help":
		a.usage(a.stdout)
		return ExitOK
	}
	c := lookupCommand(name)
	if c == nil {
		return a.exit(usageErr("unknown command %q (commands: %s)", name, commandNames()))
	}
	a.cmd = c.name
	return a.exit(c.run(a, rest[1:]))
}

func commandNames() string {
	var n []string
	for _, c := range commands {
		n = append(n, c.name)
	}
	return strings.Join(n, ", ")
}

func (a *app) usage(w io.Writer) {
	fmt.Fprintf(w, "syncguard: distributed locks with fencing tokens on PostgreSQL\n\nUsage:\n")
	for _, c := range commands {
		fmt.Fprintf(w, "  %s\n        %s\n", strings.TrimSpace("syncguard "+c.name+" "+c.args), c.summary)
	}
	fmt.Fprintf(w, "\nGlobal flags (before or after the command):\n")
	printFlags(w, a.flagSet(""), func(string) bool { return true })
	fmt.Fprintf(w, "\nEvery flag but --key can also be set in the environment: --no-prepare is\n"+
		"$SYNCGUARD_NO_PREPARE, --wait $SYNCGUARD_WAIT (the command line wins).\n"+
		"Durations are seconds (10, 2.5) or Go durations (500ms, 1m30s).\n"+
		"Connection: --dsn, else $DATABASE_URL, else the standard PG* variables\n"+
		"(PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE, PGSSLMODE, PGSERVICE, ...);\n"+
		"waiting's notifications: $SYNCGUARD_NOTIFY_DSN if set (a direct session behind a pooler).\n"+
		"Exit statuses: 0 ok, 64 usage or configuration, 69 database unavailable, 70 internal,\n"+
		"75 lock busy, 76 lock lost, 77 credentials or privileges refused;\n"+
		"run: the command's own status, 128+N if it died of signal N;\n"+
		"status: 0 held, 1 free; revoke: 0 revoked, 1 nothing held.\n"+
		"Run 'syncguard help COMMAND' for a command's flags. Full reference:\n"+
		"https://github.com/syncguard/syncguard-go/blob/main/docs/cli.md\n")
}

// flagSet returns a FlagSet for cmd with the global flags registered on it,
// keeping values already parsed before the command name.
func (a *app) flagSet(cmd string) *flag.FlagSet {
	name := "syncguard"
	if cmd != "" {
		name += " " + cmd
	}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	fs.StringVar(&a.dsn, "dsn", a.dsn, "PostgreSQL connection string (`DSN`), URL or key=value form (default $DATABASE_URL, else PG* variables)")
	fs.StringVar(&a.table, "table", a.table, "lock table `NAME` (default "+rules.DefaultTable+")")
	fs.StringVar(&a.fenceTable, "fence-table", a.fenceTable, "fence counter table `NAME` (default "+rules.DefaultFenceTable+")")
	fs.BoolVar(&a.json, "json", a.json, "print results as JSON on stdout, for scripts (not for run: its stdout is COMMAND's)")
	durationVar(fs, &a.timeout, "timeout", a.timeout, time.Millisecond, time.Hour,
		"bound on connecting and on each database operation (`DURATION`: seconds or 500ms, 1m, ...)")
	fs.BoolVar(&a.noPrepare, "no-prepare", a.noPrepare, "never use named prepared statements, so that run, status and ls work behind PgBouncer in transaction mode; --no-prepare=false prepares (direct connections, PgBouncer 1.21+ with max_prepared_statements)")
	return fs
}

var globalFlags = map[string]bool{"dsn": true, "table": true, "fence-table": true, "json": true, "timeout": true, "no-prepare": true, "version": true}

// printFlags lists the flags of fs that keep accepts, in --name form.
func printFlags(w io.Writer, fs *flag.FlagSet, keep func(string) bool) {
	fs.VisitAll(func(f *flag.Flag) {
		if !keep(f.Name) {
			return
		}
		arg, usage := flag.UnquoteUsage(f)
		dash := "--"[:min(len(f.Name), 2)] // -n, --wait
		fmt.Fprintln(w, strings.TrimRight("  "+dash+f.Name+" "+arg, " "))
		if !slices.Contains([]string{"", "false", "0", "0s"}, f.DefValue) {
			usage += " (default " + f.DefValue + ")"
		}
		if !notFromEnv[f.Name] {
			usage += " [$" + envName(f.Name) + "]"
		}
		fmt.Fprintf(w, "        %s\n", usage)
	})
}

// cmdHelp prints a command's help on stdout.
func (a *app) cmdHelp(fs *flag.FlagSet, text string) {
	c := lookupCommand(strings.Fields(a.cmd)[0])
	fmt.Fprintf(a.stdout, "Usage: %s\n\n%s\n", strings.TrimSpace("syncguard "+c.name+" "+c.args), strings.TrimSpace(text))
	var own bool
	fs.VisitAll(func(f *flag.Flag) { own = own || !globalFlags[f.Name] })
	if own {
		fmt.Fprintf(a.stdout, "\nFlags:\n")
		printFlags(a.stdout, fs, func(n string) bool { return !globalFlags[n] })
	}
	fmt.Fprintf(a.stdout, "\nGlobal flags: --dsn, --table, --fence-table, --json, --timeout, --no-prepare (see 'syncguard -h').\n")
}

var errHelp = errors.New("help shown")

// parseCmd parses a command's args with parse and, for -h, shows its help:
// help is the text after the usage line.
func (a *app) parseCmd(fs *flag.FlagSet, args []string, interspersed bool, help string) ([]string, error) {
	pos, err := a.parse(fs, args, interspersed)
	if errors.Is(err, errHelp) {
		a.cmdHelp(fs, help)
	}
	return pos, err
}

// parseNoArgs is parseCmd for a command that takes no positional
// arguments.
func (a *app) parseNoArgs(fs *flag.FlagSet, args []string, help string) error {
	pos, err := a.parseCmd(fs, args, true, help)
	if err == nil && len(pos) != 0 {
		return usageErr("%s takes no arguments, got %q", a.cmd, pos)
	}
	return err
}

// parseKey is parseCmd for a command that takes exactly one KEY.
func (a *app) parseKey(fs *flag.FlagSet, args []string, help string) (string, error) {
	pos, err := a.parseCmd(fs, args, true, help)
	if err == nil && len(pos) != 1 {
		err = usageErr("want exactly one KEY, got %d arguments", len(pos))
	}
	if err != nil {
		return "", err
	}
	return pos[0], nil
}

// parse parses args with fs, after the flags' environment variables (the
// global flags' before the command name, the command's own after it). With
// interspersed, flags may follow positional arguments (status KEY --json);
// without, parsing stops at the first one (run's COMMAND, the command
// name). "--" ends the flags.
func (a *app) parse(fs *flag.FlagSet, args []string, interspersed bool) ([]string, error) {
	global := a.cmd == ""
	if err := a.applyEnv(fs, func(name string) bool { return globalFlags[name] == global }); err != nil {
		return nil, err
	}
	var pos []string
	for {
		rest, err := a.parseMore(fs, args)
		if err != nil {
			return nil, err
		}
		consumed := len(args) - len(rest)
		if consumed > 0 && args[consumed-1] == "--" || !interspersed || len(rest) == 0 {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// expandShort splits bundled one-letter flags in the flags that lead
// args, as getopt does: "-nq" is "-n -q", "-nw5" is "-n -w 5", "-c'cmd'"
// is "-c 'cmd'". Only arguments that are no flag of fs as they stand are
// split, and only when every letter is a one-letter flag of fs; a flag
// that takes a value ends the bundle, taking the rest of it or, when
// nothing is left, the next argument. Anything from the first positional
// argument or "--" on is left alone: it is COMMAND's, or parsed later.
func expandShort(fs *flag.FlagSet, args []string) []string {
	out := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		arg := args[i]
		if arg == "--" || len(arg) < 2 || arg[0] != '-' {
			return append(out, args[i:]...)
		}
		name, _, hasValue := strings.Cut(strings.TrimLeft(arg, "-"), "=")
		if f := fs.Lookup(name); f != nil || strings.HasPrefix(arg, "--") || len(arg) == 2 {
			out = append(out, arg)
			if f != nil && !hasValue && !isBoolFlag(f) && i+1 < len(args) {
				i++
				out = append(out, args[i]) // its value, whatever it looks like
			}
			continue
		}
		split, needsNext, ok := splitBundle(fs, arg[1:])
		if !ok {
			out = append(out, arg) // flag reports it as unknown
			continue
		}
		out = append(out, split...)
		if needsNext && i+1 < len(args) {
			i++
			out = append(out, args[i])
		}
	}
	return out
}

// splitBundle splits "nqw5" into "-n", "-q", "-w", "5". needsNext: the last
// flag takes a value and the bundle had none left for it.
func splitBundle(fs *flag.FlagSet, bundle string) (split []string, needsNext, ok bool) {
	for j, r := range bundle {
		f := fs.Lookup(string(r))
		if f == nil {
			return nil, false, false
		}
		split = append(split, "-"+string(r))
		if !isBoolFlag(f) {
			rest := bundle[j+len(string(r)):]
			if rest == "" {
				return split, true, true
			}
			return append(split, strings.TrimPrefix(rest, "=")), false, true
		}
	}
	return split, false, true
}

func isBoolFlag(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// parseMore parses flags up to the next positional argument or "--": for
// parse, and after run's KEY (no environment again: it would override the
// flags before KEY).
func (a *app) parseMore(fs *flag.FlagSet, args []string) ([]string, error) {
	if err := fs.Parse(expandShort(fs, args)); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, errHelp
		}
		return nil, usageErr("%s", err)
	}
	return fs.Args(), nil
}

// cliError is an error with its exit status and the code printed with it.
type cliError struct {
	status int
	code   string // printed after the command name: "InvalidArgument", "LockLost", ...
	msg    string
	silent bool // already reported
	usage  bool // point to the command's help
}

func (e *cliError) Error() string { return e.code + ": " + e.msg }

func usageErr(format string, args ...any) error {
	return &cliError{status: ExitUsage, code: string(syncguard.ErrInvalidArgument), msg: fmt.Sprintf(format, args...), usage: true}
}

// exitCodes maps syncguard error codes onto exit statuses; any other is
// ExitInternal. AuthFailed is no outage: the same credentials and grants
// fail again until an operator changes them.
var exitCodes = map[syncguard.Code]int{
	syncguard.ErrInvalidArgument: ExitUsage, syncguard.ErrAuthFailed: ExitNoPerm,
	syncguard.ErrServiceUnavailable: ExitUnavailable, syncguard.ErrNetworkTimeout: ExitUnavailable, syncguard.ErrRateLimited: ExitUnavailable,
	syncguard.ErrAcquisitionTimeout: ExitBusy, syncguard.ErrAborted: 128 + 2,
}

// missingTablesMsg replaces the library's message for an undefined table
// (42P01), which names the Go API.
const missingTablesMsg = "lock table missing: run 'syncguard setup' first (--all for run --permits, -s/-x, several --key; or apply the DDL of 'syncguard schema' with your migration tool); " +
	"if it exists, the role lacks USAGE on its schema (search_path skips such schemas) or search_path does not include it (see 'syncguard doctor')"

// describe returns the code and one-line message of err.
func describe(err error) (status int, code, msg string) {
	var ce *cliError
	if errors.As(err, &ce) {
		return ce.status, ce.code, ce.msg
	}
	var se *syncguard.Error
	if errors.As(err, &se) {
		m := se.Msg
		if se.SQLState == "42P01" || se.SQLState == "42883" { // undefined_table (or rwlock's function): this command's own way first
			m = missingTablesMsg
		}
		if se.SQLState != "" {
			m += " (SQLSTATE " + se.SQLState + ")"
		}
		if se.Err != nil && se.Err.Error() != se.Msg {
			if m != "" {
				m += ": "
			}
			m += se.Err.Error()
		}
		return cmp.Or(exitCodes[se.Code], ExitInternal), string(se.Code), m
	}
	return ExitInternal, string(syncguard.ErrInternal), err.Error()
}

// oneLine folds a message onto one line.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// exit reports err, if any, and returns the exit status.
func (a *app) exit(err error) int {
	if err == nil || errors.Is(err, errHelp) {
		return ExitOK
	}
	status, code, msg := describe(err)
	var ce *cliError
	if errors.As(err, &ce) && ce.silent {
		return status
	}
	if ce != nil && ce.usage {
		if a.cmd != "" {
			msg += fmt.Sprintf(" (see 'syncguard help %s')", strings.Fields(a.cmd)[0])
		} else {
			msg += " (see 'syncguard -h')"
		}
	}
	a.errorf(code, "%s", msg)
	if a.json && a.cmd != "run" { // run's stdout is its command's
		writeJSON(a.stdout, map[string]any{"error": map[string]any{
			"command": a.cmd, "code": code, "message": oneLine(msg), "exitStatus": status}})
	}
	return status
}

// errorf prints "syncguard: CMD: CODE: message" on stderr, on one line.
func (a *app) errorf(code, format string, args ...any) {
	prefix := "syncguard: "
	for _, p := range []string{a.cmd, code} {
		if p != "" {
			prefix += p + ": "
		}
	}
	fmt.Fprintln(a.stderr, prefix+oneLine(fmt.Sprintf(format, args...)))
}

// notef prints a notice "syncguard: CMD: message" on stderr.
func (a *app) notef(format string, args ...any) { a.errorf("", format, args...) }

// ctx returns a context bounded by --timeout.
func (a *app) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), a.timeout)
}
