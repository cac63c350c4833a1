package cli

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/syncguard/syncguard-go/internal/replication"
	"github.com/syncguard/syncguard-go/internal/rules"
	"github.com/syncguard/syncguard-go/syncguard"
)

// finding is one result of doctor.
type finding struct {
	Check  string `json:"check"`
	Status string `json:"status"` // "ok", "warn" or "fail"
	Detail string `json:"detail"`
	Fix    string `json:"fix,omitempty"`
}

const (
	statusOK   = "ok"
	statusWarn = "warn"
	statusFail = "fail"
)

type doctor struct {
	a        *app
	db       *sql.DB
	findings []finding
	user     string
}

func (d *doctor) add(check, status, detail, fix string) {
	d.findings = append(d.findings, finding{Check: check, Status: status, Detail: oneLine(detail), Fix: strings.TrimSpace(fix)})
}

func (d *doctor) ctx() (context.Context, context.CancelFunc) { return d.a.ctx() }

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
prepared statements survive it; fence counters near their maximum; the
number of expired lock rows.

Exit status: 0 when nothing failed (warnings allowed), 1 when a check
failed, 69 when the database cannot be reached.`

func (a *app) cmdDoctor(args []string) error {
	fs := a.flagSet("doctor")
	pos, err := a.parse(fs, args, true)
	if errors.Is(err, errHelp) {
		a.cmdHelp(fs, doctorHelp)
	}
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return usageErr("doctor takes no arguments, got %q", pos)
	}
	if _, err := syncguard.SchemaSQL(a.config()); err != nil {
		return err
	}
	// doctor's own queries are never prepared, so that a pooler in
	// transaction mode cannot fail them; the prepared statement probe
	// prepares explicitly.
	db, err := a.openMode(true)
	if err != nil {
		return err
	}
	defer db.Close()
	d := &doctor{a: a, db: db}
	connErr := d.connection()
	if connErr == nil {
		locks, fences := a.tableNames()
		lockOID := d.table("lock table", locks, []column{
			{"key", "text"}, {"lock_id", "text"}, {"expires_at_ms", "bigint"},
			{"acquired_at_ms", "bigint"}, {"fence", "text"}, {"user_key", "text"}})
		if lockOID != 0 {
			d.indexes(locks, lockOID, []indexSpec{
				{name: "primary key", cols: "key", unique: true, fix: fmt.Sprintf(`ALTER TABLE %s ADD PRIMARY KEY ("key");`, rules.QuoteIdent(locks))},
				{name: "lock_id index", cols: "lock_id", unique: true, index: "idx_" + locks + "_lock_id",
					fix: fmt.Sprintf(`CREATE UNIQUE INDEX IF NOT EXISTS %s ON %s ("lock_id");`, rules.QuoteIdent("idx_"+locks+"_lock_id"), rules.QuoteIdent(locks))},
				{name: "expiry index", cols: "expires_at_ms", prefix: true, index: "idx_" + locks + "_expires",
					fix: fmt.Sprintf(`CREATE INDEX IF NOT EXISTS %s ON %s ("expires_at_ms");`, rules.QuoteIdent("idx_"+locks+"_expires"), rules.QuoteIdent(locks))},
			})
			d.privileges("lock table", locks, lockOID, []string{"SELECT", "INSERT", "UPDATE", "DELETE"})
		}
		fenceOID := d.table("fence table", fences, []column{{"fence_key", "text"}, {"fence", "bigint"}, {"key_debug", "text"}})
		if fenceOID != 0 {
			d.indexes(fences, fenceOID, []indexSpec{
				{name: "fence primary key", cols: "fence_key", unique: true, fix: fmt.Sprintf(`ALTER TABLE %s ADD PRIMARY KEY ("fence_key");`, rules.QuoteIdent(fences))},
			})
			if d.privileges("fence table", fences, fenceOID, []string{"SELECT", "INSERT", "UPDATE"}) {
				d.fenceCounters(fences)
			}
		}
		if lockOID != 0 {
			d.lockRows(locks)
		}
		d.durability()
		d.replication()
		d.clock()
		d.pooler()
	}

	failed, warned := 0, 0
	for _, f := range d.findings {
		switch f.Status {
		case statusFail:
			failed++
		case statusWarn:
			warned++
		}
	}
	if a.json {
		if err := writeJSON(a.stdout, map[string]any{"ok": failed == 0, "failed": failed, "warnings": warned, "checks": d.findings}); err != nil {
			return err
		}
	} else {
		d.print(failed, warned)
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

func (d *doctor) print(failed, warned int) {
	w := table(d.a.stdout)
	for _, f := range d.findings {
		st := f.Status
		if st == statusFail {
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
		fmt.Fprintln(d.a.stdout, "\nall checks passed")
	case failed == 0:
		fmt.Fprintf(d.a.stdout, "\nno problems, %s\n", plural(warned, "warning", "warnings"))
	default:
		fmt.Fprintf(d.a.stdout, "\n%s, %s\n", plural(failed, "problem", "problems"), plural(warned, "warning", "warnings"))
	}
}

func (d *doctor) connection() error {
	ctx, cancel := d.ctx()
	defer cancel()
	var version, user, dbname string
	var standby bool
	err := d.db.QueryRowContext(ctx, `SELECT current_setting('server_version'), current_user, current_database(), pg_is_in_recovery()`).
		Scan(&version, &user, &dbname, &standby)
	if err != nil {
		err = d.a.wrap(ctx, "connect", err)
		_, code, msg := describe(err)
		_, source := d.a.connSource()
		d.add("connection", statusFail, code+": "+msg,
			fmt.Sprintf("check the connection settings (from %s), that the server is up and accepts connections from here, and the credentials", source))
		return err
	}
	d.user = user
	d.add("connection", statusOK, fmt.Sprintf("PostgreSQL %s, database %s, user %s", version, dbname, user), "")
	if standby {
		d.add("primary", statusFail, "connected to a standby (read-only): every acquire, extend and release fails",
			"connect to the primary, e.g. with target_session_attrs=read-write in the connection string")
	}
	return nil
}

type column struct{ name, typ string }

// table checks that name resolves to a table with the columns syncguard
// uses, and returns its oid (0 when missing).
func (d *doctor) table(check, name string, cols []column) int64 {
	ctx, cancel := d.ctx()
	defer cancel()
	var oid sql.NullInt64
	var kind sql.NullString
	err := d.db.QueryRowContext(ctx, `SELECT c.oid::bigint, c.relkind::text FROM pg_class c WHERE c.oid = to_regclass($1::text)`, rules.QuoteIdent(name)).Scan(&oid, &kind)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		d.fail(check, ctx, err)
		return 0
	}
	if !oid.Valid {
		d.add(check, statusFail, fmt.Sprintf("table %s does not exist (in the search_path)", rules.QuoteIdent(name)),
			"syncguard setup (or apply the DDL of 'syncguard schema' with your migration tool)")
		return 0
	}
	if kind.String != "r" && kind.String != "p" {
		d.add(check, statusFail, fmt.Sprintf("%s is not a table (relkind %s)", rules.QuoteIdent(name), kind.String), "")
		return 0
	}
	rows, err := d.db.QueryContext(ctx, `SELECT a.attname::text, format_type(a.atttypid, a.atttypmod), a.attnotnull, a.atthasdef
FROM pg_attribute a WHERE a.attrelid = $1::bigint::oid AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum`, oid.Int64)
	if err != nil {
		d.fail(check, ctx, err)
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
			d.fail(check, ctx, err)
			return 0
		}
		have[n] = attr{t, nn, df}
		order = append(order, n)
	}
	if err := rows.Err(); err != nil {
		d.fail(check, ctx, err)
		return 0
	}
	var problems []string
	want := map[string]bool{}
	for _, c := range cols {
		want[c.name] = true
		h, ok := have[c.name]
		switch {
		case !ok:
			problems = append(problems, fmt.Sprintf("column %q is missing", c.name))
		case h.typ != c.typ:
			problems = append(problems, fmt.Sprintf("column %q is %s, want %s", c.name, h.typ, c.typ))
		}
	}
	for _, n := range order {
		if h := have[n]; !want[n] && h.notNull && !h.hasDf {
			problems = append(problems, fmt.Sprintf("extra column %q is NOT NULL without a default, so syncguard's inserts fail", n))
		}
	}
	if len(problems) > 0 {
		d.add(check, statusFail, fmt.Sprintf("%s: %s", rules.QuoteIdent(name), strings.Join(problems, "; ")),
			"the table was not created by syncguard setup: rename it away and run syncguard setup, or point --table/--fence-table at the right tables")
		return oid.Int64
	}
	d.add(check, statusOK, fmt.Sprintf("%s has the expected columns", rules.QuoteIdent(name)), "")
	return oid.Int64
}

func (d *doctor) fail(check string, ctx context.Context, err error) {
	_, code, msg := describe(d.a.wrap(ctx, check, err))
	d.add(check, statusFail, "could not check: "+code+": "+msg, "")
}

type indexSpec struct {
	name   string // check name
	cols   string // the key column
	unique bool   // must be a unique index
	prefix bool   // the column may be the first of several
	index  string // the name syncguard gives it, if any
	fix    string
}

func (d *doctor) indexes(table string, oid int64, specs []indexSpec) {
	ctx, cancel := d.ctx()
	defer cancel()
	rows, err := d.db.QueryContext(ctx, `SELECT ic.relname::text, i.indisunique, i.indisprimary, i.indisvalid, i.indpred IS NOT NULL,
       array_to_string(ARRAY(SELECT pg_get_indexdef(i.indexrelid, k, true) FROM generate_series(1, i.indnkeyatts) AS k ORDER BY k), ',')
FROM pg_index i JOIN pg_class ic ON ic.oid = i.indexrelid
WHERE i.indrelid = $1::bigint::oid ORDER BY ic.relname`, oid)
	if err != nil {
		for _, s := range specs {
			d.fail(s.name, ctx, err)
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
			d.fail(specs[0].name, ctx, err)
			return
		}
		for _, c := range strings.Split(cols, ",") {
			x.cols = append(x.cols, strings.Trim(c, `"`))
		}
		all = append(all, x)
	}
	if err := rows.Err(); err != nil {
		d.fail(specs[0].name, ctx, err)
		return
	}
	for _, s := range specs {
		var good, invalid *idx
		var named *idx
		for i := range all {
			x := &all[i]
			if x.name == s.index {
				named = x
			}
			colsOK := len(x.cols) >= 1 && x.cols[0] == s.cols && (s.prefix || len(x.cols) == 1)
			if !colsOK || x.partial || (s.unique && !x.unique) {
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
		if s.unique {
			kind = "unique index"
		}
		switch {
		case good != nil:
			d.add(s.name, statusOK, fmt.Sprintf("%s on %s(%s): %s", kind, rules.QuoteIdent(table), s.cols, rules.QuoteIdent(good.name)), "")
		case invalid != nil:
			d.add(s.name, statusFail, fmt.Sprintf("%s %s on %s(%s) is INVALID (a failed CREATE INDEX CONCURRENTLY?)", kind, rules.QuoteIdent(invalid.name), rules.QuoteIdent(table), s.cols),
				fmt.Sprintf("REINDEX INDEX %s;", rules.QuoteIdent(invalid.name)))
		default:
			fix := s.fix
			if named != nil {
				fix = fmt.Sprintf("DROP INDEX %s;  -- it exists but does not index %s as needed\n%s", rules.QuoteIdent(named.name), s.cols, s.fix)
			}
			fix += "\n(or: syncguard setup)"
			d.add(s.name, statusFail, fmt.Sprintf("no valid %s on %s(%s)", kind, rules.QuoteIdent(table), s.cols), fix)
		}
	}
}

func (d *doctor) privileges(check, table string, oid int64, privs []string) bool {
	ctx, cancel := d.ctx()
	defer cancel()
	var missing []string
	for _, p := range privs {
		var ok bool
		if err := d.db.QueryRowContext(ctx, `SELECT has_table_privilege($1::bigint::oid, $2::text)`, oid, p).Scan(&ok); err != nil {
			d.fail(check+" privileges", ctx, err)
			return false
		}
		if !ok {
			missing = append(missing, p)
		}
	}
	if len(missing) > 0 {
		d.add(check+" privileges", statusFail, fmt.Sprintf("user %s lacks %s on %s", d.user, strings.Join(missing, ", "), rules.QuoteIdent(table)),
			fmt.Sprintf("GRANT %s ON %s TO %s;", strings.Join(privs, ", "), rules.QuoteIdent(table), rules.QuoteIdent(d.user)))
		return false
	}
	d.add(check+" privileges", statusOK, fmt.Sprintf("%s on %s", strings.Join(privs, ", "), rules.QuoteIdent(table)), "")
	return true
}

func (d *doctor) fenceCounters(fences string) {
	ctx, cancel := d.ctx()
	defer cancel()
	var n, maxFence int64
	err := d.db.QueryRowContext(ctx, fmt.Sprintf(`SELECT count(*), coalesce(max("fence"), 0) FROM %s`, rules.QuoteIdent(fences))).Scan(&n, &maxFence)
	if err != nil {
		d.fail("fence counters", ctx, err)
		return
	}
	detail := fmt.Sprintf("%s, highest fence %d", plural(int(n), "key", "keys"), maxFence)
	switch {
	case maxFence >= rules.FenceMax:
		d.add("fence counters", statusFail, detail+": at the maximum, acquires of that key fail",
			"rotate the key (use a new key name for that resource); never delete fence counters")
	case maxFence > rules.FenceWarn:
		d.add("fence counters", statusWarn, detail+fmt.Sprintf(": above the warning threshold %d", int64(rules.FenceWarn)),
			"plan a key rotation for that resource before it reaches the maximum")
	default:
		d.add("fence counters", statusOK, detail, "")
	}
}

// expiredRowsWarn: expired rows are overwritten by the next acquire of
// their key, but one-off keys leave theirs behind.
const expiredRowsWarn = 100_000

func (d *doctor) lockRows(locks string) {
	ctx, cancel := d.ctx()
	defer cancel()
	var live, expired int64
	err := d.db.QueryRowContext(ctx, fmt.Sprintf(`SELECT count(*) FILTER (WHERE %[1]s), count(*) FILTER (WHERE NOT (%[1]s))
FROM (SELECT %[2]s AS now_ms) AS t, %[3]s AS l`, rules.LiveSQL("l", "t.now_ms"), rules.NowMsSQL, rules.QuoteIdent(locks))).Scan(&live, &expired)
	if err != nil {
		d.fail("lock rows", ctx, err)
		return
	}
	detail := fmt.Sprintf("%s, %s", plural(int(live), "active lock", "active locks"), plural(int(expired), "expired row", "expired rows"))
	if expired >= expiredRowsWarn {
		d.add("lock rows", statusWarn, detail+" (left by keys that are not acquired again)",
			fmt.Sprintf(`DELETE FROM %s WHERE "expires_at_ms" < %s - 60000;  -- safe: fence counters are kept elsewhere`, rules.QuoteIdent(locks), rules.NowMsSQL))
		return
	}
	d.add("lock rows", statusOK, detail, "")
}

func (d *doctor) durability() {
	ctx, cancel := d.ctx()
	defer cancel()
	var syncCommit, fsync string
	if err := d.db.QueryRowContext(ctx, `SELECT current_setting('synchronous_commit'), current_setting('fsync')`).Scan(&syncCommit, &fsync); err != nil {
		d.fail("synchronous_commit", ctx, err)
		return
	}
	if syncCommit == "off" {
		d.add("synchronous_commit", statusFail,
			"off (as this session sees it): a server crash can lose acquires that were already reported, and hand out their fences again",
			fmt.Sprintf("ALTER ROLE %s SET synchronous_commit = on;  (or set it in postgresql.conf, and keep it out of the applications' connection strings)", rules.QuoteIdent(d.user)))
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

// replication checks whether a failover can lose acknowledged locks: which
// standbys stream from this primary and whether commits wait for them
// (internal/replication; docs/ha.md). Being on a primary at all is the
// connection check's.
func (d *doctor) replication() {
	ctx, cancel := d.ctx()
	defer cancel()
	st, err := replication.Read(ctx, d.db)
	if err != nil {
		d.fail(replication.CheckStandbys, ctx, err)
		return
	}
	for _, f := range st.Findings() {
		if f.Check != replication.CheckPrimary {
			d.add(f.Check, string(f.Severity), f.Detail, f.Fix)
		}
	}
}

// clockWarn: beyond this offset, expiry times compared with the local
// clock mislead.
const clockWarn = time.Duration(rules.ToleranceMs) * time.Millisecond

func (d *doctor) clock() {
	ctx, cancel := d.ctx()
	defer cancel()
	var best, bestRTT time.Duration = 0, -1
	for range 3 {
		var ms int64
		t0 := time.Now()
		if err := d.db.QueryRowContext(ctx, `SELECT `+rules.NowMsSQL).Scan(&ms); err != nil {
			d.fail("clock", ctx, err)
			return
		}
		t1 := time.Now()
		rtt := t1.Sub(t0)
		if bestRTT < 0 || rtt < bestRTT {
			mid := t0.Add(rtt / 2)
			best, bestRTT = time.UnixMilli(ms).Sub(mid.Truncate(time.Millisecond)), rtt
		}
	}
	off := best
	dir := "ahead of"
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
func (d *doctor) pooler() {
	ctx, cancel := d.ctx()
	defer cancel()
	a, err := d.db.Conn(ctx)
	if err != nil {
		d.fail("pooler", ctx, err)
		return
	}
	defer a.Close()
	b, err := d.db.Conn(ctx)
	if err != nil {
		d.fail("pooler", ctx, err)
		return
	}
	defer b.Close()
	type querier interface {
		QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	}
	pid := func(q querier) (int64, error) {
		var p int64
		// The simple protocol: no prepared statement that a pooler could lose.
		err := q.QueryRowContext(ctx, `SELECT pg_backend_pid()`, pgx.QueryExecModeSimpleProtocol).Scan(&p)
		return p, err
	}
	// holdB runs f while B holds a transaction open.
	holdB := func(f func() error) error {
		tx, err := b.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if _, err := pid(tx); err != nil {
			return err
		}
		return f()
	}

	const rounds = 3
	aPIDs, bPIDs := map[int64]bool{}, map[int64]bool{}
	first, err := pid(a)
	if err != nil {
		d.fail("pooler", ctx, err)
		return
	}
	aPIDs[first] = true
	for range rounds {
		tx, err := b.BeginTx(ctx, nil)
		if err != nil {
			d.fail("pooler", ctx, err)
			return
		}
		pb, err1 := pid(tx)
		pa, err2 := pid(a)
		_ = tx.Rollback()
		if err := errors.Join(err1, err2); err != nil {
			d.fail("pooler", ctx, err)
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
			"lease locks (syncguard run, Backend) work through it if prepared statements do (see below); session-scoped advisory locks do not: connect directly or through a session-mode pool for those")
	} else {
		d.add("pooler", statusOK, fmt.Sprintf("no transaction-mode pooler seen (one connection stayed in server session pid %d while another held a transaction)", first), "")
	}

	if d.a.noPrepare {
		d.add("prepared statements", statusOK, "not used (--no-prepare)", "")
		return
	}
	st, err := a.PrepareContext(ctx, `SELECT pg_backend_pid()`)
	if err == nil {
		defer st.Close()
		for range rounds {
			if err = holdB(func() error {
				var p int64
				return st.QueryRowContext(ctx).Scan(&p)
			}); err != nil {
				break
			}
		}
	}
	if err != nil {
		_, code, msg := describe(d.a.wrap(ctx, "prepare", err))
		d.add("prepared statements", statusFail, "a statement prepared on a connection failed there later: "+code+": "+msg,
			"set syncguard.Config.DisablePrepare and default_query_exec_mode=exec in pgx connection strings (CLI: --no-prepare), or enable prepared statements in the pooler (PgBouncer 1.21+: max_prepared_statements)")
		return
	}
	d.add("prepared statements", statusOK, fmt.Sprintf("a prepared statement ran %d times on its connection", rounds), "")
}
