package deploy

import (
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/syncguard/syncguard-go/internal/rules"
)

// The privileges the operations need (a test checks that these cover
// every statement file). No DDL: the tables' owner creates them once.
var (
	LockTablePrivileges    = []string{"SELECT", "INSERT", "UPDATE", "DELETE"}
	FenceTablePrivileges   = []string{"SELECT", "INSERT", "UPDATE"}
	WaitersTablePrivileges = []string{"SELECT", "INSERT", "UPDATE", "DELETE"}
	HoldersTablePrivileges = []string{"SELECT", "INSERT", "UPDATE", "DELETE"}
)

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
		kind := map[bool]string{false: "index", true: "unique index"}[s.unique]
		if s.primary {
			kind = "primary key"
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

// privileges reports whether the current role has privs on the table.
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

// expiredRowsWarn: one-off keys leave expired rows behind.
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
