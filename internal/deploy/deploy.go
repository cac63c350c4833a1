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
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/syncguard/syncguard-go/driver"
	"github.com/syncguard/syncguard-go/internal/classify"
	"github.com/syncguard/syncguard-go/internal/pooler"
	"github.com/syncguard/syncguard-go/internal/replication"
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

// replication reports the primary, its standbys and whether an acquire's
// commit waits for them (internal/replication, the home of these rules;
// docs/ha.md).
func (d *deployment) replication() {
	st, err := replication.Read(d.ctx, d.q)
	if err != nil {
		d.couldNot(replication.CheckStandbys, err)
		return
	}
	for _, f := range st.Findings() {
		d.add(f.Check, string(f.Severity), f.Detail, f.Fix)
	}
}

// The privileges the operations need (the statement files in sql/; a test
// checks that these cover every statement). No DDL: SetupSchema (or your
// migrations, with SchemaSQL) creates the tables once, as their owner.
var (
	LockTablePrivileges  = []string{"SELECT", "INSERT", "UPDATE", "DELETE"}
	FenceTablePrivileges = []string{"SELECT", "INSERT", "UPDATE"}
	// A waiter's attempt inserts, updates and deletes its row; a release
	// reads and deletes the first one.
	WaitersTablePrivileges = []string{"SELECT", "INSERT", "UPDATE", "DELETE"}
	// An acquire with an identity inserts (or updates) its row and deletes
	// the key's older ones; a release deletes its own; lookups read.
	HoldersTablePrivileges = []string{"SELECT", "INSERT", "UPDATE", "DELETE"}
)

func (d *deployment) lockTable() {
	d.checkTable(d.layout.locks, LockTablePrivileges, d.lockRows)
}

func (d *deployment) fenceTable() {
	d.checkTable(d.layout.fences, FenceTablePrivileges, d.fenceCounters)
}

// checkTable checks one of the tables: its columns, its indexes and the
// role's privileges, and then, if they are granted, its rows.
func (d *deployment) checkTable(want tableLayout, privs []string, rows func()) {
	oid := d.table(want)
	if oid == 0 {
		return
	}
	d.indexes(oid, want)
	if d.privileges(want.check, want.name, oid, privs) {
		rows()
	}
}

// table checks that want's name resolves to a table with its columns and
// returns its oid (0 when it is missing).
func (d *deployment) table(want tableLayout) int64 {
	check, name := want.check, want.name
	var oid sql.NullInt64
	var kind sql.NullString
	err := d.row(`SELECT c.oid::bigint, c.relkind::text FROM pg_class c WHERE c.oid = to_regclass($1::text)`,
		[]any{rules.QuoteIdent(name)}, &oid, &kind)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		d.couldNot(check, err)
		return 0
	}
	if !oid.Valid {
		d.add(check, Fail, fmt.Sprintf("table %s does not exist (in the search_path)", rules.QuoteIdent(name)),
			"create the tables once, as their owner: syncguard.SetupSchema, or apply syncguard.SchemaSQL with your migration tool (CLI: syncguard setup)")
		return 0
	}
	if kind.String != "r" && kind.String != "p" {
		d.add(check, Fail, fmt.Sprintf("%s is not a table (relkind %s)", rules.QuoteIdent(name), kind.String), "")
		return 0
	}
	rows, err := d.q.QueryContext(d.ctx, `SELECT a.attname::text, format_type(a.atttypid, a.atttypmod), a.attnotnull, a.atthasdef
FROM pg_attribute a WHERE a.attrelid = $1::bigint::oid AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum`, oid.Int64)
	if err != nil {
		d.couldNot(check, err)
		return 0
	}
	defer rows.Close()
	type attr struct {
		typ            string
		notNull, hasDf bool
	}
	have := map[string]attr{}
	var order []string
	for rows.Next() {
		var n, t string
		var nn, df bool
		if err := rows.Scan(&n, &t, &nn, &df); err != nil {
			d.couldNot(check, err)
			return 0
		}
		have[n] = attr{t, nn, df}
		order = append(order, n)
	}
	if err := rows.Err(); err != nil {
		d.couldNot(check, err)
		return 0
	}
	var problems []string
	wanted := map[string]bool{}
	for _, c := range want.cols {
		wanted[c.name] = true
		h, ok := have[c.name]
		switch {
		case !ok:
			problems = append(problems, fmt.Sprintf("column %q is missing", c.name))
		case h.typ != c.typ:
			problems = append(problems, fmt.Sprintf("column %q is %s, want %s", c.name, h.typ, c.typ))
		case c.notNull && !h.notNull:
			problems = append(problems, fmt.Sprintf("column %q allows NULL", c.name))
		}
	}
	for _, n := range order {
		if h := have[n]; !wanted[n] && h.notNull && !h.hasDf {
			problems = append(problems, fmt.Sprintf("extra column %q is NOT NULL without a default, so syncguard's inserts fail", n))
		}
	}
	if len(problems) > 0 {
		d.add(check, Fail, fmt.Sprintf("%s: %s", rules.QuoteIdent(name), strings.Join(problems, "; ")),
			"the table was not created by syncguard.SetupSchema: rename it away and create the tables again, or configure the right table names")
		return oid.Int64
	}
	d.add(check, OK, fmt.Sprintf("%s has the expected columns", rules.QuoteIdent(name)), "")
	return oid.Int64
}

// indexes checks the primary key and the indexes of want on the table.
func (d *deployment) indexes(oid int64, want tableLayout) {
	table := want.name
	rows, err := d.q.QueryContext(d.ctx, `SELECT ic.relname::text, i.indisunique, i.indisprimary, i.indisvalid, i.indpred IS NOT NULL,
       array_to_string(ARRAY(SELECT pg_get_indexdef(i.indexrelid, k, true) FROM generate_series(1, i.indnkeyatts) AS k ORDER BY k), ',')
FROM pg_index i JOIN pg_class ic ON ic.oid = i.indexrelid
WHERE i.indrelid = $1::bigint::oid ORDER BY ic.relname`, oid)
	specs := want.indexes()
	if err != nil {
		for _, s := range specs {
			d.couldNot(s.check, err)
		}
		return
	}
	defer rows.Close()
	type idx struct {
		name                            string
		unique, primary, valid, partial bool
		cols                            []string
	}
	var all []idx
	for rows.Next() {
		var x idx
		var cols string
		if err := rows.Scan(&x.name, &x.unique, &x.primary, &x.valid, &x.partial, &cols); err != nil {
			d.couldNot(specs[0].check, err)
			return
		}
		for _, c := range strings.Split(cols, ",") {
			x.cols = append(x.cols, strings.Trim(c, `"`))
		}
		all = append(all, x)
	}
	if err := rows.Err(); err != nil {
		d.couldNot(specs[0].check, err)
		return
	}
	for _, s := range specs {
		var good, invalid, named *idx
		for i := range all {
			x := &all[i]
			if x.name == s.name {
				named = x
			}
			// The column must lead the index; a unique index must be on it
			// alone (a wider one would not make the column unique).
			colsOK := len(x.cols) >= 1 && x.cols[0] == s.col && (!s.unique || len(x.cols) == 1)
			if !colsOK || x.partial || (s.unique && !x.unique) || (s.primary && !x.primary) {
				continue
			}
			if !x.valid {
				invalid = x
				continue
			}
			if good == nil || x.primary {
				good = x
			}
		}
		kind := "index"
		switch {
		case s.primary:
			kind = "primary key"
		case s.unique:
			kind = "unique index"
		}
		switch {
		case good != nil:
			d.add(s.check, OK, fmt.Sprintf("%s on %s(%s): %s", kind, rules.QuoteIdent(table), s.col, rules.QuoteIdent(good.name)), "")
		case invalid != nil:
			d.add(s.check, Fail, fmt.Sprintf("%s %s on %s(%s) is INVALID (a failed CREATE INDEX CONCURRENTLY?)", kind, rules.QuoteIdent(invalid.name), rules.QuoteIdent(table), s.col),
				fmt.Sprintf("REINDEX INDEX %s;", rules.QuoteIdent(invalid.name)))
		default:
			fix := s.fix
			if named != nil {
				fix = fmt.Sprintf("DROP INDEX %s;  -- it exists but does not index %s as needed\n%s", rules.QuoteIdent(named.name), s.col, s.fix)
			}
			d.add(s.check, Fail, fmt.Sprintf("no valid %s on %s(%s)", kind, rules.QuoteIdent(table), s.col), fix)
		}
	}
}

// privileges checks that the current role has privs on the table and
// reports whether it has.
func (d *deployment) privileges(check, table string, oid int64, privs []string) bool {
	check += " privileges"
	var missing []string
	for _, p := range privs {
		var ok bool
		if err := d.row(`SELECT has_table_privilege($1::bigint::oid, $2::text)`, []any{oid, p}, &ok); err != nil {
			d.couldNot(check, err)
			return false
		}
		if !ok {
			missing = append(missing, p)
		}
	}
	if len(missing) > 0 {
		d.add(check, Fail, fmt.Sprintf("role %s lacks %s on %s", d.role(), strings.Join(missing, ", "), rules.QuoteIdent(table)),
			fmt.Sprintf("GRANT %s ON %s TO %s;", strings.Join(privs, ", "), rules.QuoteIdent(table), d.role()))
		return false
	}
	d.add(check, OK, fmt.Sprintf("%s on %s", strings.Join(privs, ", "), rules.QuoteIdent(table)), "")
	return true
}

func (d *deployment) fenceCounters() {
	const check = "fence counters"
	var n, maxFence int64
	err := d.row(fmt.Sprintf(`SELECT count(*), coalesce(max("fence"), 0) FROM %s`, rules.QuoteIdent(d.t.Names["fences"])), nil, &n, &maxFence)
	if err != nil {
		d.couldNot(check, err)
		return
	}
	detail := fmt.Sprintf("%d keys, highest fence %d", n, maxFence)
	switch {
	case maxFence >= rules.FenceMax:
		d.add(check, Fail, detail+": at the maximum, acquires of that key fail",
			"rotate the key (use a new key name for that resource); never delete fence counters")
	case maxFence > rules.FenceWarn:
		d.add(check, Warn, detail+fmt.Sprintf(": above the warning threshold %d", int64(rules.FenceWarn)),
			"plan a key rotation for that resource before it reaches the maximum")
	default:
		d.add(check, OK, detail, "")
	}
}

// expiredRowsWarn: expired rows are overwritten by the next acquire of
// their key, but one-off keys leave theirs behind.
const expiredRowsWarn = 100_000

func (d *deployment) lockRows() {
	const check = "lock rows"
	var live, expired int64
	err := d.row(fmt.Sprintf(`WITH t AS (SELECT %[2]s AS now_ms)
SELECT count(*) FILTER (WHERE %[1]s), count(*) FILTER (WHERE NOT (%[1]s))
FROM t, %[3]s AS l`, rules.LiveSQL("l", "t.now_ms"), rules.NowMsSQL, rules.QuoteIdent(d.t.Names["locks"])), nil, &live, &expired)
	if err != nil {
		d.couldNot(check, err)
		return
	}
	detail := fmt.Sprintf("%d live locks, %d expired rows", live, expired)
	if expired >= expiredRowsWarn {
		d.add(check, Warn, detail+" (left by keys that are not acquired again)",
			fmt.Sprintf(`DELETE FROM %s WHERE "expires_at_ms" < (SELECT %s) - 60000;  -- safe: fence counters are kept elsewhere`, rules.QuoteIdent(d.t.Names["locks"]), rules.NowMsSQL))
		return
	}
	d.add(check, OK, detail, "")
}

func (d *deployment) durability() {
	var syncCommit, fsync string
	if err := d.row(`SELECT current_setting('synchronous_commit'), current_setting('fsync')`, nil, &syncCommit, &fsync); err != nil {
		d.couldNot("synchronous_commit", err)
		return
	}
	if syncCommit == "off" {
		d.add("synchronous_commit", Fail,
			"off (as this session sees it): a server crash can lose acquires that were already reported, and hand out their fences again",
			fmt.Sprintf("ALTER ROLE %s SET synchronous_commit = on;  (or set it in postgresql.conf, and keep it out of the applications' connection strings)", d.role()))
	} else {
		d.add("synchronous_commit", OK, syncCommit, "")
	}
	if fsync == "off" {
		d.add("fsync", Fail,
			"off: a crash of the server machine can lose committed acquires and hand out their fences again",
			"set fsync = on in postgresql.conf and reload")
	} else {
		d.add("fsync", OK, fsync, "")
	}
}

// clockWarn: beyond this offset, expiry times compared with the local
// clock mislead (locks stay correct: only the server's clock decides).
const clockWarn = rules.ToleranceMs * time.Millisecond

func (d *deployment) clock() {
	var best, bestRTT time.Duration = 0, -1
	for range 3 {
		var ms int64
		t0 := time.Now()
		if err := d.row(`SELECT `+rules.NowMsSQL, nil, &ms); err != nil {
			d.couldNot("clock", err)
			return
		}
		rtt := time.Since(t0)
		if bestRTT < 0 || rtt < bestRTT {
			mid := t0.Add(rtt / 2)
			best, bestRTT = time.UnixMilli(ms).Sub(mid.Truncate(time.Millisecond)), rtt
		}
	}
	off, dir := best, "ahead of"
	if off < 0 {
		off, dir = -off, "behind"
	}
	detail := fmt.Sprintf("server clock is %v %s this machine's (±%v)", off.Round(time.Millisecond), dir, (bestRTT/2 + time.Millisecond).Round(time.Millisecond))
	if off > clockWarn+bestRTT/2 {
		d.add("clock", Warn, detail+": locks stay correct (only the server's clock decides expiry), but expiry times compared with this machine's clock are off by as much",
			"synchronize both clocks with NTP (chrony, systemd-timesyncd)")
		return
	}
	d.add("clock", OK, detail, "")
}

// poolerFailed records a pooler check that could not finish. A prepared
// statement lost or clashing between server sessions is itself the sign of
// a transaction-mode pooler.
func (d *deployment) poolerFailed(err error) {
	detail, lost := d.describe(err)
	if !lost {
		d.couldNot("pooler", err)
		return
	}
	d.add("pooler", Warn, "a prepared statement went missing or clashed between server sessions ("+detail+
		"): a pooler in transaction or statement mode (PgBouncer, pgcat, RDS Proxy, ...) is in the way", poolerFix)
	d.preparedFailure(detail)
}

const poolerFix = "lease locks (Backend) work through it if prepared statements do (see below); session-scoped advisory locks do not: connect directly or through a session-mode pool for those"

// pooler looks for a pooler between here and PostgreSQL with the
// Backend's own detector (pooler.Detect: does a pooler answer for the
// server?) and asks whether it is in transaction or statement mode
// (pooler.TransactionMode). Then it probes a statement prepared on one
// connection while another holds a transaction, which such a pool may send
// to a session that never saw it.
func (d *deployment) pooler() {
	const rounds = 3
	ctx := d.ctx
	a, err := d.t.DB.Conn(ctx)
	if err != nil {
		d.poolerFailed(err)
		return
	}
	defer a.Close()
	b, err := d.t.DB.Conn(ctx)
	if err != nil {
		d.poolerFailed(err)
		return
	}
	defer b.Close()
	v, err := pooler.Detect(ctx, a, d.t.Dialect, d.t.OneShot)
	if err != nil {
		d.poolerFailed(err)
		return
	}
	txMode, sessions, first, err := pooler.TransactionMode(ctx, a, b, d.t.OneShot, rounds)
	if err != nil {
		d.poolerFailed(err)
		return
	}
	answered := ""
	if v.Pooler {
		answered = fmt.Sprintf("; a pooler answered for the server (the connection announced backend pid %d, its server session is pid %d): a Backend sends its statements unprepared", v.Announced, v.Session)
	}
	switch {
	case txMode:
		d.add("pooler", Warn,
			fmt.Sprintf("one client connection's statements ran in %d different server sessions, or shared one with another client connection: a pooler in transaction or statement mode (PgBouncer, pgcat, RDS Proxy, ...) is in the way", sessions)+answered,
			poolerFix)
	case v.Pooler:
		d.add("pooler", OK, "a pooler in session mode, as far as seen (one connection stayed in server session pid "+fmt.Sprint(first)+" while another held a transaction)"+answered, "")
	default:
		d.add("pooler", OK, fmt.Sprintf("no transaction-mode pooler seen (one connection stayed in server session pid %d while another held a transaction)", first), "")
	}

	if d.preparedFailed {
		return // failed already, in an earlier check
	}
	if d.t.NoPrepare {
		d.add("prepared statements", OK, "not used (Config.DisablePrepare)", "")
		return
	}
	// Prepared on purpose: this checks that prepared statements survive.
	st, err := a.PrepareContext(ctx, `SELECT pg_backend_pid()`)
	if err == nil {
		defer st.Close()
		for range rounds {
			if err = func() error {
				tx, err := b.BeginTx(ctx, nil)
				if err != nil {
					return err
				}
				defer tx.Rollback() //nolint:errcheck // read-only
				var p int64
				if err := pooler.QueryRow(ctx, pooler.Unprepared(tx, d.t.OneShot), `SELECT pg_backend_pid()`, nil, &p); err != nil {
					return err
				}
				return st.QueryRowContext(ctx).Scan(&p)
			}(); err != nil {
				break
			}
		}
	}
	if err != nil {
		detail, _ := d.describe(err)
		d.add("prepared statements", Fail, "a statement prepared on a connection failed there later: "+detail, preparedFix)
		return
	}
	d.add("prepared statements", OK, fmt.Sprintf("a prepared statement ran %d times on its connection", rounds), "")
}
