package syncguard

import (
	"fmt"
	"regexp"
	"strings"
	"sync"

	"github.com/syncguard/syncguard-go/internal/rules"
)

// The layout of the tables as sql/schema.sql defines them, read from that
// file (their one home), for CheckDeployment.

// tableLayout is one CREATE TABLE of the schema and the indexes on it.
type tableLayout struct {
	placeholder string // "locks" or "fences"
	check       string // "lock table" or "fence table"
	cols        []colLayout
	pk          string // the primary key column
	idx         []indexLayout
}

type colLayout struct {
	name, typ string // typ as format_type prints it: "text", "bigint"
	notNull   bool   // NOT NULL or PRIMARY KEY
}

type indexLayout struct {
	placeholder string // of the index name
	col         string
	unique      bool
	ddl         string // the CREATE INDEX statement, with placeholders
}

type schemaLayout struct{ locks, fences tableLayout }

var (
	tableRE  = regexp.MustCompile(`(?s)CREATE TABLE IF NOT EXISTS \{\{(\w+)\}\} \((.*?)\n\);`)
	columnRE = regexp.MustCompile(`^\s*"(\w+)"\s+(\w+)(.*?),?\s*$`)
	indexRE  = regexp.MustCompile(`CREATE (UNIQUE )?INDEX IF NOT EXISTS \{\{(\w+)\}\} ON \{\{(\w+)\}\} \("(\w+)"\);`)
)

// schema is the parsed sql/schema.sql. TestSchemaLayout checks the parse.
var schema = sync.OnceValue(func() schemaLayout {
	l, err := parseSchema(mustRead("schema.sql"))
	if err != nil {
		panic("syncguard: sql/schema.sql: " + err.Error()) // embedded at build time; TestSchemaLayout parses it
	}
	return l
})

func parseSchema(text string) (schemaLayout, error) {
	tables := map[string]*tableLayout{}
	for _, m := range tableRE.FindAllStringSubmatch(text, -1) {
		t := &tableLayout{placeholder: m[1]}
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
		tables[t.placeholder] = t
	}
	for _, m := range indexRE.FindAllStringSubmatch(text, -1) {
		t := tables[m[3]]
		if t == nil && m[3] == "waiters" {
			continue // checked on its own (deployment_wait.go)
		}
		if t == nil {
			return schemaLayout{}, fmt.Errorf("index %s on unknown table %s", m[2], m[3])
		}
		t.idx = append(t.idx, indexLayout{placeholder: m[2], col: m[4], unique: m[1] != "", ddl: m[0]})
	}
	locks, fences := tables["locks"], tables["fences"]
	if locks == nil || fences == nil || locks.pk == "" || fences.pk == "" {
		return schemaLayout{}, fmt.Errorf("want tables {{locks}} and {{fences}} with primary keys, got %d tables", len(tables))
	}
	locks.check, fences.check = "lock table", "fence table"
	return schemaLayout{locks: *locks, fences: *fences}, nil
}

// indexChecks names the check of each index of the schema, by the
// placeholder of its name.
var indexChecks = map[string]string{"lock_id_index": "lock_id index", "expires_index": "expiry index"}

// indexSpec is one index CheckDeployment looks for.
type indexSpec struct {
	check, name, col string
	unique, primary  bool
	fix              string
}

// indexes returns the primary key and the indexes of t, for the table
// named table in the configuration being checked.
func (t tableLayout) indexes(table string) []indexSpec {
	// Index names derive from the lock table's name; the fence table has
	// none of its own.
	lockTable, fenceTable := table, table+"_"
	if t.placeholder == "fences" {
		lockTable, fenceTable = table+"_", table
	}
	names := schemaNames(lockTable, fenceTable)
	pkCheck := "primary key" // the names `syncguard doctor --json` has always used
	if t.placeholder == "fences" {
		pkCheck = "fence primary key"
	}
	out := []indexSpec{{check: pkCheck, col: t.pk, unique: true, primary: true,
		fix: fmt.Sprintf("ALTER TABLE %s ADD PRIMARY KEY (%s);", rules.QuoteIdent(table), rules.QuoteIdent(t.pk))}}
	for _, ix := range t.idx {
		fix, err := renderText(ix.ddl, lockTable, fenceTable)
		if err != nil {
			fix = ix.ddl
		}
		out = append(out, indexSpec{check: indexChecks[ix.placeholder], name: names[ix.placeholder], col: ix.col, unique: ix.unique,
			fix: fix + "\n(or: syncguard.SetupSchema, which creates what is missing)"})
	}
	return out
}
