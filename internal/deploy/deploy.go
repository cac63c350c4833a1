// Package deploy holds the checks of syncguard.CheckDeployment (and so of
// `syncguard doctor`): whether syncguard can work correctly on a database
// as it is deployed, and what to fix. Package syncguard resolves the
// configuration and turns the findings into its public Report; the checks
// run their statements as a Backend does when it does not prepare
// (internal/pooler), so that a pooler in transaction mode cannot fail them.
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

// Finding is the outcome of one check (syncguard.Finding documents it).
type Finding struct {
	Check, Status, Detail, Fix string
}

// The statuses of a Finding.
const (
	OK   = "ok"
	Warn = "warn"
	Fail = "fail"
)

// Target is one deployment to check, as package syncguard resolved its
// configuration.
type Target struct {
	DB      *sql.DB
	Dialect driver.Dialect // reads the driver's errors and pids; nil: generic shapes only
	// OneShot is the dialect's driver.OneShot arguments, or nil: every
	// statement goes out unprepared as the Backend sends it (pooler.Statement).
	OneShot []any
	// Names are the configuration's table and index names, unquoted, by
	// their placeholder in the statement files ("locks", "fences",
	// "lock_id_index", "waiters", ...).
	Names map[string]string
	// Schema is the DDL of the configuration (syncguard.SchemaSQL).
	Schema    string
	NoPrepare bool // Config.DisablePrepare
	// Notifications is the "notifications" check: whether waiting is woken
	// on release (status "ok" or "warn").
	Notifications func(ctx context.Context) (status, detail, fix string)
}

// Check runs the checks on t in order and returns their findings. The
// error is non-nil only when the database cannot be reached (the findings
// then hold the failed "connection"), or when the schema cannot be read (a
// bug: a test parses it). It is the driver's error, for the caller to
// classify.
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
// findings with d.add; it never returns an error (a query that fails
// becomes a "fail" finding saying the check could not run). Add new checks
// here.
var checks = []func(d *deployment){
	(*deployment).lockTable,
	(*deployment).fenceTable,
	(*deployment).waitersTableCheck,
	(*deployment).holdersTableCheck,
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
	// preparedFailed: the "prepared statements" finding has failed already.
	preparedFailed bool
}

// row runs query with args unprepared on the pool and scans its one row.
func (d *deployment) row(query string, args []any, dest ...any) error {
	return pooler.QueryRow(d.ctx, d.q, query, args, dest...)
}

// waitersTableCheck is CheckDeployment's "waiters table" check: the queue
// of waiters exists and the role may use it. Without it every operation
// still works, but waiting polls and keeps no order (wait.go).
func (d *deployment) waitersTableCheck() {
	d.optionalTable("waiters table", d.t.Names["waiters"], WaitersTablePrivileges,
		"Lock and WithLock wait by polling, without a queue (no arrival order, no hand-off in the release's commit)", "may queue in it")
}

// holdersTableCheck is CheckDeployment's "holders table" check: the
// holder identities' table exists and the role may use it. Without it
// every operation still works, but no identity is stored or shown.
func (d *deployment) holdersTableCheck() {
	d.optionalTable("holders table", d.t.Names["holders"], HoldersTablePrivileges,
		"no holder identity (Config.Identity, LockOptions.Identity) is stored or shown", "may store identities in it")
}

// optionalTable checks a table that the Backend can do without (with what
// missing costs), and the role's privileges on it.
func (d *deployment) optionalTable(check, name string, privs []string, without, ok string) {
	var missing sql.NullString
	var exists bool
	err := d.row(`SELECT to_regclass($1::text) IS NOT NULL,
  (SELECT string_agg(p, ', ') FROM unnest($2::text[]) AS p
   WHERE to_regclass($1::text) IS NOT NULL AND NOT has_table_privilege(to_regclass($1::text), p))`,
		[]any{rules.QuoteIdent(name), "{" + strings.Join(privs, ",") + "}"}, &exists, &missing)
	switch {
	case err != nil:
		d.couldNot(check, err)
	case !exists:
		d.add(check, "warn", fmt.Sprintf("table %s is missing: %s", name, without),
			"run syncguard setup (or syncguard.SetupSchema, or apply SchemaSQL): it creates only what is missing")
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

// couldNot records that check could not run because of err, naming the
// SQLSTATE. A prepared statement lost or clashing in a pooler is a
// deployment problem of its own: it becomes the failed "prepared
// statements" finding (once), with its fix.
func (d *deployment) couldNot(check string, err error) {
	detail, lost := d.describe(err)
	d.add(check, Fail, "could not check: "+detail, "")
	if lost {
		d.preparedFailure(detail)
	}
}

// describe is "Code (SQLSTATE xxxxx): message" for a finding's detail, as
// syncguard classifies err (internal/classify), and whether err says that
// a pooler lost a prepared statement (pooler.StatementLost, the rule the
// Backend follows too).
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
	// A prepared-statement clash (a driver that prepares even an unprepared
	// statement without arguments, behind a transaction-mode pooler) is not
	// an unreachable database: the server answered. Each retry may reach
	// another server session.
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
