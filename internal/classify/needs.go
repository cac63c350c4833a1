package classify

import (
	"fmt"

	"github.com/syncguard/syncguard-go/internal/rules"
)

// Needs says which privileges syncguard's operation op needs on the lock
// table and the fence table, for the message of a privilege error (42501);
// "" for an operation it does not know, or without a table name.
func Needs(op, table, fenceTable string) string {
	if table == "" {
		return ""
	}
	locks, fences := rules.QuoteIdent(table), rules.QuoteIdent(fenceTable)
	switch op {
	case "acquire":
		return fmt.Sprintf("acquire needs USAGE on the schema of %s and %s and SELECT, INSERT, UPDATE on both", locks, fences)
	case "release":
		return fmt.Sprintf("release needs USAGE on the schema of %s and SELECT, DELETE on it", locks)
	case "extend":
		return fmt.Sprintf("extend needs USAGE on the schema of %s and SELECT, UPDATE on it", locks)
	case "isLocked", "lookup", "list":
		return fmt.Sprintf("%s needs USAGE on the schema of %s and SELECT on it", op, locks)
	case "lastFence":
		return fmt.Sprintf("lastFence needs USAGE on the schema of %s and SELECT on it", fences)
	case "cleanup":
		return fmt.Sprintf("cleanup needs USAGE on the schema of %s and SELECT, DELETE on it", locks)
	case "setupSchema":
		return fmt.Sprintf("setupSchema needs CREATE on the schema that will hold %s and %s (the first schema of search_path), or the tables created beforehand by a role that has it", locks, fences)
	}
	return ""
}
