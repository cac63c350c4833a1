// Package deploy holds the checks of doctor.Check (and so of `syncguard
// doctor`). Package syncguard resolves the configuration (Run), package
// doctor turns the findings into its Report; the checks send their
// statements unprepared, as a Backend behind a pooler does
// (internal/pooler).
package deploy

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/syncguard/syncguard-go/driver"
	"github.com/syncguard/syncguard-go/internal/classify"
	"github.com/syncguard/syncguard-go/internal/pooler"
	"github.com/syncguard/syncguard-go/internal/rules"
)

// Run resolves cfg (a *syncguard.Config; nil: the defaults) as package
// syncguard does, runs Check on db and classifies its error as a
// *syncguard.Error. Package syncguard sets it (this package is below it,
// so cannot call it); package doctor calls it.
var Run func(ctx context.Context, db *sql.DB, cfg any) ([]Finding, error)

// Finding is the outcome of one check (doctor.Finding documents it).
type Finding struct {
	Check, Status, Detail, Fix string
}

// The statuses of a Finding.
const (
	OK   = "ok"
	Warn = "warn"
	Fail = "fail"
)

// Target is one deployment to check, as package syncguard resolved it.
type Target struct {
	DB        *sql.DB
	Dialect   driver.Dialect    // reads the driver's errors and pids; nil: generic shapes only
	OneShot   []any             // the dialect's driver.OneShot arguments, or nil (pooler.Statement)
	Names     map[string]string // table and index names, unquoted, by placeholder ("locks", ...)
	Schema    string            // the DDL (syncguard.SchemaSQL)
	NoPrepare bool              // Config.DisablePrepare
	Funcs     []string          // the statement functions' signatures (internal/stmtfunc)
	// Notifications is the "notifications" check (status "ok" or "warn").
	Notifications func(ctx context.Context) (status, detail, fix string)
}

// Check runs the checks on t in order and returns their findings; the
// error, for the caller to classify, says that the database cannot be
// reached (the failed "connection") or the schema cannot be read (a bug).
func Check(ctx context.Context, t Target) ([]Finding, error) {
	layout, err := parseSchema(t.Schema, t.Names)
	if err != nil {
		return nil, fmt.Errorf("syncguard: internal: the schema's layout: %w", err)
	}
	d := &deployment{ctx: ctx, t: t, layout: layout, q: pooler.Unprepared(t.DB, t.OneShot)}
	if err := d.connection(); err != nil {
		return d.findings, err
	}
	for _, check := range checks {
		check(d)
	}
	return d.findings, nil
}

// checks run in order after the connection check. A check adds its
// findings with d.add; a query that fails is a "fail" finding (couldNot).
var checks = []func(d *deployment){
	func(d *deployment) { d.checkTable(d.layout.locks, LockTablePrivileges, d.lockRows) },
	func(d *deployment) { d.checkTable(d.layout.fences, FenceTablePrivileges, d.fenceCounters) },
	(*deployment).waitersTableCheck,
	(*deployment).holdersTableCheck,
	(*deployment).statementFunctions,
	(*deployment).durability,
	(*deployment).replication,
	(*deployment).clock,
	(*deployment).pooler,
	(*deployment).notifications,
}

// deployment is the state of one Check run.
type deployment struct {
	ctx      context.Context
	t        Target
	layout   schemaLayout
	q        pooler.Querier // t.DB, unprepared
	findings []Finding
	user     string

	preparedFailed bool // the "prepared statements" finding has failed already
}

func (d *deployment) row(query string, args []any, dest ...any) error {
	return pooler.QueryRow(d.ctx, d.q, query, args, dest...)
}

// waitersTableCheck and holdersTableCheck check the optional tables.
func (d *deployment) waitersTableCheck() {
	d.optionalTable("waiters table", d.t.Names["waiters"], "near", WaitersTablePrivileges,
		"Lock and WithLock wait by polling, without a queue (no arrival order, no hand-off in the release's commit)", "may queue in it")
}

func (d *deployment) holdersTableCheck() {
	d.optionalTable("holders table", d.t.Names["holders"], "", HoldersTablePrivileges,
		"no holder identity (Config.Identity, LockOptions.Identity) is stored or shown", "may store identities in it")
}

// statementFunctions: whether this version's statement functions exist
// and the role may run them.
func (d *deployment) statementFunctions() {
	const check = "statement functions"
	var bad, total int
	err := d.row(`SELECT count(*) FILTER (WHERE f.p IS NULL OR NOT has_function_privilege(f.p, 'EXECUTE')), count(*)
  FROM (SELECT to_regprocedure(quote_ident(current_schema()) || '.' || s) AS p FROM unnest(string_to_array($1::text, chr(10))) AS s) AS f`,
		[]any{strings.Join(d.t.Funcs, "\n")}, &bad, &total)
	switch {
	case err != nil:
		d.couldNot(check, err)
	case bad > 0:
		d.add(check, Warn, fmt.Sprintf("%d of this version's %d statement functions are missing or not executable by role %s: "+
			"statements sent unprepared (behind a transaction-mode pooler, or with DisablePrepare) are planned at every execution "+
			"(a release: about 1.5 ms of server time more), and prepared ones at their first five executions on each connection", bad, total, d.role()),
			"run syncguard setup (or syncguard.SetupSchema, or apply SchemaSQL): it creates only what is missing; "+
				"if they exist, GRANT EXECUTE ON FUNCTION ... TO "+d.role()+" (they run with the caller's privileges)")
	default:
		d.add(check, OK, fmt.Sprintf("the %d statement functions of this version exist and the role %s may run them", total, d.role()), "")
	}
}

// optionalTable checks a table that the Backend can do without, the
// column a table of an older version lacks (column, "" for none), and the
// role's privileges on it.
func (d *deployment) optionalTable(check, name, column string, privs []string, without, ok string) {
	var missing sql.NullString
	var exists, old bool
	err := d.row(`SELECT to_regclass($1::text) IS NOT NULL,
  (SELECT string_agg(p, ', ') FROM unnest($2::text[]) AS p
   WHERE to_regclass($1::text) IS NOT NULL AND NOT has_table_privilege(to_regclass($1::text), p)),
  $3::text <> '' AND to_regclass($1::text) IS NOT NULL AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_attribute AS a
   WHERE a."attrelid" = to_regclass($1::text) AND a."attname" = $3::text AND NOT a."attisdropped")`,
		[]any{rules.QuoteIdent(name), "{" + strings.Join(privs, ",") + "}", column}, &exists, &missing, &old)
	const setup = "run syncguard setup (or syncguard.SetupSchema, or apply SchemaSQL): it creates only what is missing"
	switch {
	case err != nil:
		d.couldNot(check, err)
	case !exists:
		d.add(check, "warn", fmt.Sprintf("table %s is missing: %s", name, without), setup)
	case old:
		d.add(check, "warn", fmt.Sprintf("table %s lacks the column %q (an older version's table): %s", name, column, without), setup)
	case missing.Valid:
		d.add(check, "warn", fmt.Sprintf("role %s lacks %s on %s: %s", d.role(), missing.String, name, without),
			fmt.Sprintf("GRANT %s ON %s TO %s;", strings.Join(privs, ", "), rules.QuoteIdent(name), d.role()))
	default:
		d.add(check, "ok", fmt.Sprintf("%s exists and the role %s", name, ok), "")
	}
}

// notifications: whether waiting is woken on release (Target.Notifications).
func (d *deployment) notifications() {
	ctx, cancel := context.WithTimeout(d.ctx, 15*time.Second)
	defer cancel()
	status, detail, fix := d.t.Notifications(ctx)
	d.add("notifications", status, detail, fix)
}

func (d *deployment) add(check, status, detail, fix string) {
	d.findings = append(d.findings, Finding{Check: check, Status: status,
		Detail: strings.Join(strings.Fields(detail), " "), Fix: strings.TrimSpace(fix)})
}

// couldNot records that check could not run because of err; a prepared
// statement lost in a pooler also fails "prepared statements" (once).
func (d *deployment) couldNot(check string, err error) {
	detail, lost := d.describe(err)
	d.add(check, Fail, "could not check: "+detail, "")
	if lost {
		d.preparedFailure(detail)
	}
}

// describe is "Code (SQLSTATE xxxxx): message" as syncguard classifies err,
// and whether a pooler lost a prepared statement (pooler.StatementLost).
func (d *deployment) describe(err error) (detail string, lost bool) {
	r := classify.Error(d.ctx, d.t.Dialect, err)
	if r.SQLState == "" {
		return fmt.Sprintf("%s: %s", r.Code, r.Msg), false
	}
	return fmt.Sprintf("%s (SQLSTATE %s): %s", r.Code, r.SQLState, r.Msg), pooler.StatementLost(r.SQLState, err)
}

const preparedFix = "set Config.DisablePrepare (and default_query_exec_mode=exec in pgx connection strings; CLI: --no-prepare), " +
	"or enable prepared statements in the pooler (PgBouncer 1.21+: max_prepared_statements)"

// preparedFailure adds the failed "prepared statements" finding, once.
func (d *deployment) preparedFailure(detail string) {
	if d.preparedFailed {
		return
	}
	d.preparedFailed = true
	d.add("prepared statements", Fail,
		"a prepared statement failed in another server session than the one it was prepared in, or clashed with another client's: "+
			detail+" (a pooler in transaction mode sits in between and the driver prepares statements)", preparedFix)
}

// role is the current role, quoted, for GRANT fixes.
func (d *deployment) role() string {
	if d.user == "" {
		return "<the service's role>"
	}
	return rules.QuoteIdent(d.user)
}

func (d *deployment) connection() error {
	var version, user, dbname string
	var err error
	// A lost prepared statement is not an unreachable database: the server
	// answered. Each retry may reach another server session.
	for range 3 {
		err = d.row(`SELECT current_setting('server_version'), current_user::text, current_database()::text`, nil, &version, &user, &dbname)
		if err == nil {
			break
		}
		if _, lost := d.describe(err); !lost {
			break
		}
	}
	if err != nil {
		detail, lost := d.describe(err)
		if lost {
			d.add("connection", OK, "the server answered, but the first query failed: "+detail+" (see prepared statements)", "")
			d.preparedFailure(detail)
			return nil
		}
		d.add("connection", Fail, detail,
			"check the connection settings, that the server is up and accepts connections from here, and the credentials")
		return err
	}
	d.user = user
	d.add("connection", OK, fmt.Sprintf("PostgreSQL %s, database %s, user %s", version, dbname, user), "")
	return nil
}
