package txguard

import (
	"context"
	"database/sql"
	"fmt"
	"regexp"
	"strings"

	"github.com/syncguard/syncguard-go/internal/rules"
)

// identRE is a plain SQL identifier, as syncguard.Config's table names.
var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// fenceTrigger is the fence guard's trigger name on every table.
const fenceTrigger = "syncguard_fence_guard"

// FenceGuardSQL returns the DDL that installs a fence guard on a resource
// table that keeps its writer's fence in column: a BEFORE UPDATE trigger
// (INSERT ... ON CONFLICT DO UPDATE fires it too) that rejects a row
// whose column is below the stored value, or NULL where a value was
// stored, with SQLSTATE SG002 (SQLStateStaleFence) and a message naming
// the table, the column and both fences. An equal fence passes. A plain
// INSERT of a new row and a DELETE carry no stored fence to compare:
// check the lease (Guard.Hold) in their transaction. The column may be
// bigint or the 15-digit text fence (both compare in fence order).
//
// table is a plain identifier, optionally schema-qualified
// ("billing.accounts"); column a plain identifier. The DDL creates the
// function <table>_fence_guard (in the table's schema) and the trigger
// syncguard_fence_guard, and is safe to re-run. Bad names are
// InvalidArgument.
func FenceGuardSQL(table, column string) (string, error) {
	const op = "txguard.fenceGuard"
	parts := strings.Split(table, ".")
	if len(parts) > 2 {
		return "", invalidArg(op, fmt.Sprintf("table %q: want name or schema.name", table))
	}
	for _, p := range append(parts, column) {
		if !identRE.MatchString(p) || len(p) > 63 {
			return "", invalidArg(op, fmt.Sprintf("%q is not a plain SQL identifier (want ^[A-Za-z_][A-Za-z0-9_]*$, at most 63 bytes)", p))
		}
	}
	fn := parts[len(parts)-1] + "_fence_guard"
	if len(fn) > 63 {
		return "", invalidArg(op, fmt.Sprintf("table name %q is too long for the function name %q (at most 63 bytes)", parts[len(parts)-1], fn))
	}
	quoted := make([]string, len(parts))
	for i, p := range parts {
		quoted[i] = rules.QuoteIdent(p)
	}
	quoted[len(quoted)-1] = rules.QuoteIdent(fn)
	return render("fence_guard.sql", rules.DefaultTable, map[string]string{
		"table":      quoteQualified(parts),
		"guard_fn":   strings.Join(quoted, "."),
		"column":     rules.QuoteIdent(column),
		"column_lit": "'" + column + "'",
		"trigger":    rules.QuoteIdent(fenceTrigger),
	}), nil
}

func quoteQualified(parts []string) string {
	q := make([]string, len(parts))
	for i, p := range parts {
		q[i] = rules.QuoteIdent(p)
	}
	return strings.Join(q, ".")
}

// SetupFenceGuard runs FenceGuardSQL(table, column) in one transaction.
// It needs CREATE on the table's schema and the TRIGGER privilege on the
// table (its owner has both); writers need nothing more than their own
// privileges on the table.
func SetupFenceGuard(ctx context.Context, db *sql.DB, table, column string) error {
	ddl, err := FenceGuardSQL(table, column)
	if err != nil {
		return err
	}
	if db == nil {
		return invalidArg("txguard.fenceGuard", "db must not be nil")
	}
	return runDDL(ctx, "txguard.fenceGuard", db, nil, ddl)
}
