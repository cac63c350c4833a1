package cli

import (
	"fmt"
	"io"
	"strings"

	"github.com/syncguard/syncguard-go/doctor"
	"github.com/syncguard/syncguard-go/internal/deploy"
	"github.com/syncguard/syncguard-go/syncguard"
)

const doctorHelp = `
Checks that syncguard can work correctly against this database and says
what to fix: the connection; the lock and fence tables, their columns,
primary keys and indexes; the privileges of the current role; the server's
clock against this machine's; durability settings (synchronous_commit,
fsync) that fences depend on across crashes; replication: which standbys
stream from this primary and whether the commit that acknowledges an
acquire waits for them (synchronous_standby_names, sync_state,
synchronous_commit), since a failover to a standby that lacks an
acknowledged commit hands its fence out again; whether a connection pooler
in transaction mode sits between here and PostgreSQL, and whether
prepared statements survive it; whether notifications reach a LISTEN
connection, so that waiting for a contended lock is woken on release
(or falls back to polling); fence counters near their maximum; the
number of expired lock rows.

Exit status: 0 when nothing failed (warnings allowed), 1 when a check
failed, 69 when the database cannot be reached, 77 when it refuses the
credentials, 64 when the connection settings are malformed or name a
database that does not exist.`

func (a *app) cmdDoctor(args []string) error {
	if err := a.parseNoArgs(a.flagSet("doctor"), args, doctorHelp); err != nil {
		return err
	}
	if _, err := syncguard.SchemaSQL(a.config()); err != nil {
		return err
	}
	// doctor's queries are never prepared, so that a pooler in transaction
	// mode cannot fail them; the prepared statement probe prepares
	// explicitly.
	db, err := a.openMode(true)
	if err != nil {
		return err
	}
	defer db.Close()
	ctx, cancel := a.ctx()
	defer cancel()
	// The checks are the library's (doctor.Check), so that a
	// smoke test and doctor judge a deployment alike.
	report, connErr := doctor.Check(ctx, db, a.config())
	failed, warned := 0, 0
	for i := range report.Findings {
		f := &report.Findings[i]
		if f.Check == "connection" && f.Status == deploy.Fail {
			_, source := a.connSource()
			f.Fix = fmt.Sprintf("check the connection settings (from %s), that the server is up and accepts connections from here, and the credentials", source)
		}
		if f.Check == "prepared statements" {
			// Advice for this command's user, which works when followed
			// literally: the CLI prepares only when told to.
			switch {
			case f.Status == deploy.OK && !a.prepares():
				f.Detail = "not used (--no-prepare, the default; or default_query_exec_mode in the connection string)"
			case f.Status == deploy.Fail:
				f.Fix = "drop --no-prepare=false (or SYNCGUARD_NO_PREPARE=false): syncguard's commands do not prepare by default\n" +
					"or enable prepared statements in the pooler (PgBouncer 1.21+: max_prepared_statements = 100)\n" +
					"programs that use the library through this path need nothing for syncguard's statements (a Backend detects the pooler and stops preparing); with pgx, their own SQL on the same pool needs default_query_exec_mode=exec in the connection string"
			}
		}
		f.Detail = oneLine(f.Detail)
		switch f.Status {
		case deploy.Fail:
			failed++
		case deploy.Warn:
			warned++
		}
	}
	if a.json {
		if err := writeJSON(a.stdout, map[string]any{"ok": failed == 0, "failed": failed, "warnings": warned, "checks": report.Findings}); err != nil {
			return err
		}
	} else {
		printFindings(a.stdout, report.Findings, failed, warned)
	}
	if connErr != nil {
		status, _, _ := describe(connErr)
		return &cliError{status: status, silent: true}
	}
	if failed > 0 {
		return &cliError{status: ExitFindings, silent: true}
	}
	return nil
}

func printFindings(out io.Writer, findings []doctor.Finding, failed, warned int) {
	w := table(out)
	for _, f := range findings {
		st := f.Status
		if st == deploy.Fail {
			st = "FAIL"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\n", st, f.Check, f.Detail)
		prefix := "fix: "
		for _, l := range strings.Split(f.Fix, "\n") {
			if l != "" {
				fmt.Fprintf(w, "\t\t%s%s\n", prefix, l)
				prefix = "     "
			}
		}
	}
	w.Flush()
	switch {
	case failed == 0 && warned == 0:
		fmt.Fprintln(out, "\nall checks passed")
	case failed == 0:
		fmt.Fprintf(out, "\nno problems, %s\n", plural(warned, "warning", "warnings"))
	default:
		fmt.Fprintf(out, "\n%s, %s\n", plural(failed, "problem", "problems"), plural(warned, "warning", "warnings"))
	}
}
