package deploy

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/syncguard/syncguard-go/internal/rules"
)

// The layout of the tables as the schema (syncguard.SchemaSQL) defines them.

// tableLayout is one CREATE TABLE of the schema and the indexes on it.
type tableLayout struct {
	name  string // as configured, unquoted
	check string // "lock table" or "fence table"
	cols  []colLayout
	pk    string // the primary key column
	idx   []indexLayout
}

type colLayout struct {
	name, typ string // typ as format_type prints it: "text", "bigint"
	notNull   bool   // NOT NULL or PRIMARY KEY
}

type indexLayout struct {
	check, name, col string
	unique           bool
	ddl              string // the CREATE INDEX statement
}

type schemaLayout struct{ locks, fences tableLayout }

var (
	tableRE  = regexp.MustCompile(`(?s)CREATE TABLE IF NOT EXISTS "(\w+)" \((.*?)\n\);`)
	columnRE = regexp.MustCompile(`^\s*"(\w+)"\s+(\w+)(.*?),?\s*$`)
	indexRE  = regexp.MustCompile(`CREATE (UNIQUE )?INDEX IF NOT EXISTS "(\w+)" ON "(\w+)" \("(\w+)"\);`)
)

// indexChecks names the check of each index, by its name's placeholder.
var indexChecks = map[string]string{"lock_id_index": "lock_id index", "expires_index": "expiry index"}

// parseSchema reads the layout of the lock and fence tables from ddl, the
// schema rendered with names (the other tables: optionalTable).
func parseSchema(ddl string, names map[string]string) (schemaLayout, error) {
	placeholder := map[string]string{}
	for p, n := range names {
		placeholder[n] = p
	}
	tables := map[string]*tableLayout{}
	for _, m := range tableRE.FindAllStringSubmatch(ddl, -1) {
		t := &tableLayout{name: m[1]}
		for _, line := range strings.Split(m[2], "\n") {
			if strings.TrimSpace(line) == "" {
				continue
			}
			c := columnRE.FindStringSubmatch(line)
			if c == nil {
				return schemaLayout{}, fmt.Errorf("cannot read column definition %q", line)
			}
			rest := strings.ToUpper(c[3])
			col := colLayout{name: c[1], typ: strings.ToLower(c[2]),
				notNull: strings.Contains(rest, "NOT NULL") || strings.Contains(rest, "PRIMARY KEY")}
			if strings.Contains(rest, "PRIMARY KEY") {
				t.pk = col.name
			}
			t.cols = append(t.cols, col)
		}
		tables[t.name] = t
	}
	locks, fences := tables[names["locks"]], tables[names["fences"]]
	if locks == nil || fences == nil || locks.pk == "" || fences.pk == "" {
		return schemaLayout{}, fmt.Errorf("want the lock and fence tables with primary keys, got %d tables", len(tables))
	}
	for _, m := range indexRE.FindAllStringSubmatch(ddl, -1) {
		t := tables[m[3]]
		if t != locks && t != fences {
			continue // the waiters and holders tables' (optionalTable)
		}
		check := indexChecks[placeholder[m[2]]]
		if check == "" {
			return schemaLayout{}, fmt.Errorf("index %s has no check name (indexChecks)", m[2])
		}
		t.idx = append(t.idx, indexLayout{check: check, name: m[2], col: m[4], unique: m[1] != "", ddl: m[0]})
	}
	locks.check, fences.check = "lock table", "fence table"
	return schemaLayout{locks: *locks, fences: *fences}, nil
}

// indexSpec is one index doctor.Check looks for.
type indexSpec struct {
	check, name, col string
	unique, primary  bool
	fix              string
}

// indexes returns the primary key and the indexes of t.
func (t tableLayout) indexes() []indexSpec {
	pkCheck := "primary key" // the names `syncguard doctor --json` has always used
	if t.check == "fence table" {
		pkCheck = "fence primary key"
	}
	out := []indexSpec{{check: pkCheck, col: t.pk, unique: true, primary: true,
		fix: fmt.Sprintf("ALTER TABLE %s ADD PRIMARY KEY (%s);", rules.QuoteIdent(t.name), rules.QuoteIdent(t.pk))}}
	for _, ix := range t.idx {
		out = append(out, indexSpec{check: ix.check, name: ix.name, col: ix.col, unique: ix.unique,
			fix: ix.ddl + "\n(or: syncguard.SetupSchema, which creates what is missing)"})
	}
	return out
}
