package syncguard

import (
	"database/sql"

	"github.com/syncguard/syncguard-go/internal/sqltx"
)

// unwrapSQLTx returns the *sql.Tx that tx (an ORM's wrapper) is, or embeds
// (sqltx.Unwrap); else nil.
func unwrapSQLTx(tx any) *sql.Tx { return sqltx.Unwrap(tx) }
