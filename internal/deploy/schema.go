package deploy

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/syncguard/syncguard-go/internal/rules"
)

// ExistsQuery is one statement, without arguments, that returns one row
// when every object (table or index, unquoted) exists in the current
// schema, and none otherwise.
func ExistsQuery(objects []string) string {
	var conds []string
	for _, o := range objects {
		conds = append(conds, fmt.Sprintf("to_regclass(quote_ident(current_schema()) || '.' || '%s') IS NOT NULL", rules.QuoteIdent(o)))
	}
	return "SELECT 1 WHERE current_schema() IS NOT NULL AND " + strings.Join(conds, " AND ")
}

// ColumnCond is a condition to append to ExistsQuery: the column of table
// (in the current schema) exists, as a table of an older version lacks it.
func ColumnCond(table, column string) string {
	return fmt.Sprintf("EXISTS (SELECT 1 FROM pg_catalog.pg_attribute WHERE attrelid = to_regclass(quote_ident(current_schema()) || '.' || '%s') AND attname = '%s' AND NOT attisdropped)",
		rules.QuoteIdent(table), column)
}

// CreateGrantHint names the role and the schema in the GRANT that lets
// SetupSchema create.
func CreateGrantHint(ctx context.Context, db *sql.DB) string {
	var user, schemaName string
	err := db.QueryRowContext(ctx, `SELECT current_user::text, coalesce(current_schema()::text, '')`).Scan(&user, &schemaName)
	if err != nil || schemaName == "" {
		return "the role needs CREATE on the schema (GRANT CREATE ON SCHEMA ... TO ...)"
	}
	return fmt.Sprintf("role %s needs CREATE on schema %s (as the schema's owner: GRANT CREATE ON SCHEMA %s TO %s;)",
		rules.QuoteIdent(user), rules.QuoteIdent(schemaName), rules.QuoteIdent(schemaName), rules.QuoteIdent(user))
}

// SplitStatements splits the schema file on semicolons at line ends and
// drops comment-only pieces. The schema has no semicolons inside strings.
func SplitStatements(ddl string) []string {
	var out []string
	for _, part := range strings.Split(ddl, ";\n") {
		var keep []string
		for _, line := range strings.Split(part, "\n") {
			if t := strings.TrimSpace(line); t != "" && !strings.HasPrefix(t, "--") {
				keep = append(keep, line)
			}
		}
		if s := strings.TrimSpace(strings.TrimSuffix(strings.Join(keep, "\n"), ";")); s != "" {
			out = append(out, s)
		}
	}
	return out
}
