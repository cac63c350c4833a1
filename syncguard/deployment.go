package syncguard

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/syncguard/syncguard-go/internal/replication"
	"github.com/syncguard/syncguard-go/internal/rules"
)

// Report is the result of CheckDeployment: one Finding per check, in the
// order the checks ran.
type Report struct {
	Findings []Finding
}

// Finding is the outcome of one check of CheckDeployment.
type Finding struct {
	// Check names what was checked: "connection", "lock table", "primary
	// key" (of the lock table), "lock_id index", "expiry index", "lock
	// table privileges", "lock rows", "fence table", "fence primary key",
	// "fence table privileges", "fence counters", "synchronous_commit",
	// "fsync", "primary", "replication", "synchronous commit", "clock",
	// "pooler", "prepared statements", "notifications". Later versions may
	// add checks.
	Check string
	// Status is "ok", "warn" (syncguard works, but something deserves a
	// look) or "fail" (syncguard does not work correctly as deployed).
	Status string
	// Detail says what was found, in one line.
	Detail string
	// Fix says what to do about a warning or failure: SQL to run or a
	// setting to change, possibly several lines. Empty for "ok".
	Fix string
}

// OK reports whether no check failed (warnings allowed).
func (r Report) OK() bool { return len(r.Failed()) == 0 }

// Failed returns the findings whose Status is "fail".
func (r Report) Failed() []Finding {
	var out []Finding
	for _, f := range r.Findings {
		if f.Status == statusFail {
			out = append(out, f)
		}
	}
	return out
}

// Err returns nil when no check failed, else an Internal *Error naming
// each failed check and what it found: a smoke test can simply do
//
//	if err := report.Err(); err != nil { t.Fatal(err) }
func (r Report) Err() error {
	failed := r.Failed()
	if len(failed) == 0 {
		return nil
	}
	parts := make([]string, len(failed))
	for i, f := range failed {
		parts[i] = f.Check + ": " + f.Detail
	}
	return &Error{Op: "checkDeployment", Code: CodeInternal,
		Msg: fmt.Sprintf("%d deployment checks failed: %s", len(failed), strings.Join(parts, "; "))}
}

const (
	statusOK   = "ok"
	statusWarn = "warn"
	statusFail = "fail"
)

// CheckDeployment checks that syncguard can work correctly on db as it is
// deployed, with the tables cfg names (nil: the defaults), and says what to
// fix. It only reads: it creates, changes and locks nothing, so it runs as
// the least-privileged role your service uses, for example in a smoke test
// after a deployment or from `syncguard doctor`.
//
// It checks the connection; the lock and fence tables, their columns,
// primary keys and indexes, exactly as SchemaSQL defines them; the
// privileges the operations need (SELECT, INSERT, UPDATE and DELETE on the
// lock table; SELECT, INSERT and UPDATE on the fence table; no DDL); the
// fence counters against their maximum and the expired lock rows; the
// durability settings fences depend on across crashes (synchronous_commit,
// fsync); replication (a primary, not a standby; which standbys stream
// from it and whether the commit that acknowledges an acquire waits for
// them: see docs/ha.md); the server's clock against this machine's; and
// whether a connection pooler in transaction mode sits in between, and
// whether prepared statements survive it (unless cfg.DisablePrepare).
//
// The error is non-nil only when the checks could not run: bad
// configuration (InvalidArgument, before any I/O), or a database that
// cannot be reached (the Report then holds the failed "connection"
// finding). A deployment with problems gives a nil error and a Report
// whose Err (or OK) tells; that includes a prepared statement lost or
// clashing behind a transaction-mode pooler (SQLSTATE 26000 or 42P05, in
// any check: the failed "prepared statements" finding, with its fix).
func CheckDeployment(ctx context.Context, db *sql.DB, cfg *Config) (Report, error) {
	const op = "checkDeployment"
	r, err := cfg.resolve()
	if err != nil {
		err.(*Error).Op = op
		return Report{}, err
	}
	if db == nil {
		return Report{}, invalidArg(op, "db must not be nil")
	}
	if e := ctxErr(ctx, op); e != nil {
		return Report{}, e
	}
	if r.dialect == nil {
		r.dialect, _ = lookupDialect(db)
	}
	d := &deployment{ctx: ctx, db: db, cfg: r, cl: classifier{dialect: r.dialect}}
	if err := d.connection(); err != nil {
		return d.report, err
	}
	for _, check := range deploymentChecks {
		check(d)
	}
	if e := ctxErr(ctx, op); e != nil {
		return d.report, e
	}
	return d.report, nil
}

// deploymentChecks run in order after the connection check. A check adds
// its findings with d.add; it never returns an error (a query that fails
// becomes a "fail" finding saying the check could not run). Add new
// checks here.
var deploymentChecks = []func(d *deployment){
	(*deployment).lockTable,
	(*deployment).fenceTable,
	(*deployment).waitersTableCheck,
	(*deployment).durability,
	(*deployment).replication,
	(*deployment).clock,
	(*deployment).pooler,
	(*deployment).notifications,
}

// waitersTablePrivileges: a waiter's attempt inserts, updates and deletes
// its row; a release reads and deletes the first one.
var waitersTablePrivileges = []string{"SELECT", "INSERT", "UPDATE", "DELETE"}

// waitersTableCheck is CheckDeployment's "waiters table" check: the queue
// of waiters exists and the role may use it. Without it every operation
// still works, but waiting polls and keeps no order (wait.go).
func (d *deployment) waitersTableCheck() {
	name := waitersTable(d.cfg.table)
	var missing sql.NullString
	var exists bool
	err := d.db.QueryRowContext(d.ctx, `SELECT to_regclass($1::text) IS NOT NULL,
  (SELECT string_agg(p, ', ') FROM unnest($2::text[]) AS p
   WHERE to_regclass($1::text) IS NOT NULL AND NOT has_table_privilege(to_regclass($1::text), p))`,
		rules.QuoteIdent(name), "{"+strings.Join(waitersTablePrivileges, ",")+"}").Scan(&exists, &missing)
	switch {
	case err != nil:
		d.couldNot("waiters table", err)
	case !exists:
		d.add("waiters table", "warn", fmt.Sprintf("table %s is missing: Lock and WithLock wait by polling, without a queue (no arrival order, no hand-off in the release's commit)", name),
			"run syncguard setup (or syncguard.SetupSchema, or apply SchemaSQL): it creates only what is missing")
	case missing.Valid:
		d.add("waiters table", "warn", fmt.Sprintf("role %s lacks %s on %s: Lock and WithLock wait by polling, without a queue", d.role(), missing.String, name),
			fmt.Sprintf("GRANT %s ON %s TO %s;", strings.Join(waitersTablePrivileges, ", "), rules.QuoteIdent(name), d.role()))
	default:
		d.add("waiters table", "ok", fmt.Sprintf("%s exists and the role may queue in it", name), "")
	}
}

// notifications: whether waiting is woken on release (deployment_wait.go).
func (d *deployment) notifications() {
	ctx, cancel := context.WithTimeout(d.ctx, 15*time.Second)
	defer cancel()
	status, detail, fix := checkNotifications(ctx, d.db, d.cfg)
	d.add("notifications", status, detail, fix)
}

// deployment is the state of one CheckDeployment run.
type deployment struct {
	ctx    context.Context
	db     *sql.DB
	cfg    resolved
	cl     classifier
	report Report
	user   string
	// preparedFailed: the "prepared statements" finding has failed already.
	preparedFailed bool
}

func (d *deployment) add(check, status, detail, fix string) {
	d.report.Findings = append(d.report.Findings, Finding{Check: check, Status: status,
		Detail: strings.Join(strings.Fields(detail), " "), Fix: strings.TrimSpace(fix)})
}

// couldNot records that check could not run because of err, naming the
// SQLSTATE. A prepared statement lost or clashing in a pooler is a
// deployment problem of its own: it becomes the failed "prepared
// statements" finding (once), with its fix.
func (d *deployment) couldNot(check string, err error) {
	e := d.cl.wrap(d.ctx, "checkDeployment", err)
	d.add(check, statusFail, "could not check: "+describeErr(e), "")
	if preparedLost(e) {
		d.preparedFailure(e)
	}
}

// describeErr is "Code (SQLSTATE xxxxx): message" for a finding's detail.
func describeErr(e *Error) string {
	if e.SQLState != "" {
		return fmt.Sprintf("%s (SQLSTATE %s): %s", e.Code, e.SQLState, e.Msg)
	}
	return fmt.Sprintf("%s: %s", e.Code, e.Msg)
}

// preparedLost: the server says a statement the driver prepared does not
// exist in this session (26000) or another client's has its name (42P05):
// a pooler in transaction mode moves the driver between server sessions
// while it keeps prepared statements (pgx's default statement cache).
func preparedLost(e *Error) bool { return e.SQLState == "26000" || e.SQLState == "42P05" }

const preparedFix = "set Config.DisablePrepare (and default_query_exec_mode=exec in pgx connection strings; CLI: --no-prepare), " +
	"or enable prepared statements in the pooler (PgBouncer 1.21+: max_prepared_statements)"

// preparedFailure adds the failed "prepared statements" finding, once.
func (d *deployment) preparedFailure(e *Error) {
	if d.preparedFailed {
		return
	}
	d.preparedFailed = true
	d.add("prepared statements", statusFail,
		"a prepared statement failed in another server session than the one it was prepared in, or clashed with another client's: "+
			describeErr(e)+" (a pooler in transaction mode sits in between and the driver prepares statements)", preparedFix)
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
	// A prepared-statement clash (pgx's statement cache behind a
	// transaction-mode pooler) is not an unreachable database: the server
	// answered. Each retry may reach another server session.
	for range 3 {
		err = d.db.QueryRowContext(d.ctx, `SELECT current_setting('server_version'), current_user::text, current_database()::text`).
			Scan(&version, &user, &dbname)
		if err == nil || !preparedLost(d.cl.wrap(d.ctx, "checkDeployment", err)) {
			break
		}
	}
	if err != nil {
		e := d.cl.wrap(d.ctx, "checkDeployment", err)
		if preparedLost(e) {
			d.add("connection", statusOK, "the server answered, but the first query failed: "+describeErr(e)+" (see prepared statements)", "")
			d.preparedFailure(e)
			return nil
		}
		d.add("connection", statusFail, describeErr(e),
			"check the connection settings, that the server is up and accepts connections from here, and the credentials")
		return e
	}
	d.user = user
	d.add("connection", statusOK, fmt.Sprintf("PostgreSQL %s, database %s, user %s", version, dbname, user), "")
	return nil
}

// replication reports the primary, its standbys and whether an acquire's
// commit waits for them (internal/replication, the home of these rules;
// docs/ha.md).
func (d *deployment) replication() {
	st, err := replication.Read(d.ctx, d.db)
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
	lockTablePrivileges  = []string{"SELECT", "INSERT", "UPDATE", "DELETE"}
	fenceTablePrivileges = []string{"SELECT", "INSERT", "UPDATE"}
)

func (d *deployment) lockTable() {
	d.checkTable("lock table", d.cfg.table, schema().locks, lockTablePrivileges, d.lockRows)
}

func (d *deployment) fenceTable() {
	d.checkTable("fence table", d.cfg.fenceTable, schema().fences, fenceTablePrivileges, d.fenceCounters)
}

// checkTable checks one of the tables: its columns, its indexes and the
// role's privileges, and then, if they are granted, its rows.
func (d *deployment) checkTable(check, name string, want tableLayout, privs []string, rows func()) {
	oid := d.table(check, name, want)
	if oid == 0 {
		return
	}
	d.indexes(oid, name, want)
	if d.privileges(check, name, oid, privs) {
		rows()
	}
}

// table checks that name resolves to a table with the columns of want and
// returns its oid (0 when it is missing).
func (d *deployment) table(check, name string, want tableLayout) int64 {
	var oid sql.NullInt64
	var kind sql.NullString
	err := d.db.QueryRowContext(d.ctx, `SELECT c.oid::bigint, c.relkind::text FROM pg_class c WHERE c.oid = to_regclass($1::text)`,
		rules.QuoteIdent(name)).Scan(&oid, &kind)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		d.couldNot(check, err)
		return 0
	}
	if !oid.Valid {
		d.add(check, statusFail, fmt.Sprintf("table %s does not exist (in the search_path)", rules.QuoteIdent(name)),
			"create the tables once, as their owner: syncguard.SetupSchema, or apply syncguard.SchemaSQL with your migration tool (CLI: syncguard setup)")
		return 0
	}
	if kind.String != "r" && kind.String != "p" {
		d.add(check, statusFail, fmt.Sprintf("%s is not a table (relkind %s)", rules.QuoteIdent(name), kind.String), "")
		return 0
	}
	rows, err := d.db.QueryContext(d.ctx, `SELECT a.attname::text, format_type(a.atttypid, a.atttypmod), a.attnotnull, a.atthasdef
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
		d.add(check, statusFail, fmt.Sprintf("%s: %s", rules.QuoteIdent(name), strings.Join(problems, "; ")),
			"the table was not created by syncguard.SetupSchema: rename it away and create the tables again, or configure the right table names")
		return oid.Int64
	}
	d.add(check, statusOK, fmt.Sprintf("%s has the expected columns", rules.QuoteIdent(name)), "")
	return oid.Int64
}

// indexes checks the primary key and the indexes of want on the table.
func (d *deployment) indexes(oid int64, table string, want tableLayout) {
	rows, err := d.db.QueryContext(d.ctx, `SELECT ic.relname::text, i.indisunique, i.indisprimary, i.indisvalid, i.indpred IS NOT NULL,
       array_to_string(ARRAY(SELECT pg_get_indexdef(i.indexrelid, k, true) FROM generate_series(1, i.indnkeyatts) AS k ORDER BY k), ',')
FROM pg_index i JOIN pg_class ic ON ic.oid = i.indexrelid
WHERE i.indrelid = $1::bigint::oid ORDER BY ic.relname`, oid)
	specs := want.indexes(table)
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
			d.add(s.check, statusOK, fmt.Sprintf("%s on %s(%s): %s", kind, rules.QuoteIdent(table), s.col, rules.QuoteIdent(good.name)), "")
		case invalid != nil:
			d.add(s.check, statusFail, fmt.Sprintf("%s %s on %s(%s) is INVALID (a failed CREATE INDEX CONCURRENTLY?)", kind, rules.QuoteIdent(invalid.name), rules.QuoteIdent(table), s.col),
				fmt.Sprintf("REINDEX INDEX %s;", rules.QuoteIdent(invalid.name)))
		default:
			fix := s.fix
			if named != nil {
				fix = fmt.Sprintf("DROP INDEX %s;  -- it exists but does not index %s as needed\n%s", rules.QuoteIdent(named.name), s.col, s.fix)
			}
			d.add(s.check, statusFail, fmt.Sprintf("no valid %s on %s(%s)", kind, rules.QuoteIdent(table), s.col), fix)
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
		if err := d.db.QueryRowContext(d.ctx, `SELECT has_table_privilege($1::bigint::oid, $2::text)`, oid, p).Scan(&ok); err != nil {
			d.couldNot(check, err)
			return false
		}
		if !ok {
			missing = append(missing, p)
		}
	}
	if len(missing) > 0 {
		d.add(check, statusFail, fmt.Sprintf("role %s lacks %s on %s", d.role(), strings.Join(missing, ", "), rules.QuoteIdent(table)),
			fmt.Sprintf("GRANT %s ON %s TO %s;", strings.Join(privs, ", "), rules.QuoteIdent(table), d.role()))
		return false
	}
	d.add(check, statusOK, fmt.Sprintf("%s on %s", strings.Join(privs, ", "), rules.QuoteIdent(table)), "")
	return true
}

func (d *deployment) fenceCounters() {
	const check = "fence counters"
	var n, maxFence int64
	err := d.db.QueryRowContext(d.ctx, fmt.Sprintf(`SELECT count(*), coalesce(max("fence"), 0) FROM %s`, rules.QuoteIdent(d.cfg.fenceTable))).Scan(&n, &maxFence)
	if err != nil {
		d.couldNot(check, err)
		return
	}
	detail := fmt.Sprintf("%d keys, highest fence %d", n, maxFence)
	switch {
	case maxFence >= rules.FenceMax:
		d.add(check, statusFail, detail+": at the maximum, acquires of that key fail",
			"rotate the key (use a new key name for that resource); never delete fence counters")
	case maxFence > rules.FenceWarn:
		d.add(check, statusWarn, detail+fmt.Sprintf(": above the warning threshold %d", int64(rules.FenceWarn)),
			"plan a key rotation for that resource before it reaches the maximum")
	default:
		d.add(check, statusOK, detail, "")
	}
}

// expiredRowsWarn: expired rows are overwritten by the next acquire of
// their key, but one-off keys leave theirs behind.
const expiredRowsWarn = 100_000

func (d *deployment) lockRows() {
	const check = "lock rows"
	var live, expired int64
	err := d.db.QueryRowContext(d.ctx, fmt.Sprintf(`SELECT count(*) FILTER (WHERE %[1]s), count(*) FILTER (WHERE NOT (%[1]s))
FROM (SELECT %[2]s AS now_ms) AS t, %[3]s AS l`, rules.LiveSQL("l", "t.now_ms"), rules.NowMsSQL, rules.QuoteIdent(d.cfg.table))).Scan(&live, &expired)
	if err != nil {
		d.couldNot(check, err)
		return
	}
	detail := fmt.Sprintf("%d live locks, %d expired rows", live, expired)
	if expired >= expiredRowsWarn {
		d.add(check, statusWarn, detail+" (left by keys that are not acquired again)",
			fmt.Sprintf(`DELETE FROM %s WHERE "expires_at_ms" < %s - 60000;  -- safe: fence counters are kept elsewhere`, rules.QuoteIdent(d.cfg.table), rules.NowMsSQL))
		return
	}
	d.add(check, statusOK, detail, "")
}

func (d *deployment) durability() {
	var syncCommit, fsync string
	if err := d.db.QueryRowContext(d.ctx, `SELECT current_setting('synchronous_commit'), current_setting('fsync')`).Scan(&syncCommit, &fsync); err != nil {
		d.couldNot("synchronous_commit", err)
		return
	}
	if syncCommit == "off" {
		d.add("synchronous_commit", statusFail,
			"off (as this session sees it): a server crash can lose acquires that were already reported, and hand out their fences again",
			fmt.Sprintf("ALTER ROLE %s SET synchronous_commit = on;  (or set it in postgresql.conf, and keep it out of the applications' connection strings)", d.role()))
	} else {
		d.add("synchronous_commit", statusOK, syncCommit, "")
	}
	if fsync == "off" {
		d.add("fsync", statusFail,
			"off: a crash of the server machine can lose committed acquires and hand out their fences again",
			"set fsync = on in postgresql.conf and reload")
	} else {
		d.add("fsync", statusOK, fsync, "")
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
		if err := d.db.QueryRowContext(d.ctx, `SELECT `+rules.NowMsSQL).Scan(&ms); err != nil {
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
		d.add("clock", statusWarn, detail+": locks stay correct (only the server's clock decides expiry), but expiry times compared with this machine's clock are off by as much",
			"synchronize both clocks with NTP (chrony, systemd-timesyncd)")
		return
	}
	d.add("clock", statusOK, detail, "")
}

// pooler looks for a pooler in transaction or statement mode between here
// and PostgreSQL. Two client connections, A and B: B holds a transaction
// open (and so a server session) while A runs a statement, a few times
// over. Directly or through a session-mode pool, A always runs in one
// server session and B in another. Through a transaction-mode pool, A's
// statements land in different server sessions, or B gets the session A
// just used. The same arrangement probes a statement prepared on A, which
// such a pool may send to a session that never saw it.
// poolerFailed records a pooler check that could not finish. A prepared
// statement lost or clashing between server sessions is itself the sign of
// a transaction-mode pooler.
func (d *deployment) poolerFailed(err error) {
	e := d.cl.wrap(d.ctx, "checkDeployment", err)
	if !preparedLost(e) {
		d.couldNot("pooler", err)
		return
	}
	d.add("pooler", statusWarn, "a prepared statement went missing or clashed between server sessions ("+describeErr(e)+
		"): a pooler in transaction or statement mode (PgBouncer, pgcat, RDS Proxy, ...) is in the way", poolerFix)
	d.preparedFailure(e)
}

const poolerFix = "lease locks (Backend) work through it if prepared statements do (see below); session-scoped advisory locks do not: connect directly or through a session-mode pool for those"

func (d *deployment) pooler() {
	ctx := d.ctx
	a, err := d.db.Conn(ctx)
	if err != nil {
		d.poolerFailed(err)
		return
	}
	defer a.Close()
	b, err := d.db.Conn(ctx)
	if err != nil {
		d.poolerFailed(err)
		return
	}
	defer b.Close()
	type querier interface {
		QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	}
	pid := func(q querier) (int64, error) {
		var p int64
		err := q.QueryRowContext(ctx, `SELECT pg_backend_pid()`).Scan(&p)
		return p, err
	}
	const rounds = 3
	aPIDs, bPIDs := map[int64]bool{}, map[int64]bool{}
	first, err := pid(a)
	if err != nil {
		d.poolerFailed(err)
		return
	}
	aPIDs[first] = true
	for range rounds {
		tx, err := b.BeginTx(ctx, nil)
		if err != nil {
			d.poolerFailed(err)
			return
		}
		pb, err1 := pid(tx)
		pa, err2 := pid(a)
		_ = tx.Rollback()
		if err := errors.Join(err1, err2); err != nil {
			d.poolerFailed(err)
			return
		}
		aPIDs[pa], bPIDs[pb] = true, true
	}
	shared := false
	for p := range bPIDs {
		shared = shared || aPIDs[p]
	}
	if len(aPIDs) > 1 || shared {
		d.add("pooler", statusWarn,
			fmt.Sprintf("one client connection's statements ran in %d different server sessions, or shared one with another client connection: a pooler in transaction or statement mode (PgBouncer, pgcat, RDS Proxy, ...) is in the way", len(aPIDs)),
			poolerFix)
	} else {
		d.add("pooler", statusOK, fmt.Sprintf("no transaction-mode pooler seen (one connection stayed in server session pid %d while another held a transaction)", first), "")
	}

	if d.preparedFailed {
		return // failed already, in an earlier check
	}
	if d.cfg.noPrepare {
		d.add("prepared statements", statusOK, "not used (Config.DisablePrepare)", "")
		return
	}
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
				if _, err := pid(tx); err != nil {
					return err
				}
				var p int64
				return st.QueryRowContext(ctx).Scan(&p)
			}(); err != nil {
				break
			}
		}
	}
	if err != nil {
		e := d.cl.wrap(ctx, "prepare", err)
		d.add("prepared statements", statusFail, "a statement prepared on a connection failed there later: "+describeErr(e), preparedFix)
		return
	}
	d.add("prepared statements", statusOK, fmt.Sprintf("a prepared statement ran %d times on its connection", rounds), "")
}
