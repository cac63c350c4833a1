package syncguard

import (
	"database/sql"
	"reflect"
)

// unwrapSQLTx returns, for Backend.WithTx, the *sql.Tx that tx (an ORM's
// transaction wrapper) is, or that it embeds: as an embedded *sql.Tx field
// (*sqlx.Tx, bun.Tx), or an embedded interface field holding one (GORM's
// *gorm.PreparedStmtTX, whose Tx field is the *sql.Tx when GORM runs on
// database/sql), followed through at most maxTxDepth levels of embedding.
// nil when there is none.
//
// WithTx runs its statements on that *sql.Tx, not through the wrapper's
// own query methods, which may prepare what they run (GORM's PrepareStmt:
// it prepares the text and then counts a driver's one-shot arguments as
// parameters, "sql: expected 6 arguments, got 7", and leaves a named
// statement on the connection, which a transaction-mode pooler loses) or
// rewrite it (bun.Tx expands "?"). Embedding is the wrapper's statement
// that it is that transaction: the statements still run in it.
func unwrapSQLTx(tx any) *sql.Tx {
	return findSQLTx(reflect.ValueOf(tx), 0)
}

// maxTxDepth bounds the search through embedded fields.
const maxTxDepth = 4

var sqlTxType = reflect.TypeFor[*sql.Tx]()

func findSQLTx(v reflect.Value, depth int) *sql.Tx {
	if !v.IsValid() || depth > maxTxDepth {
		return nil
	}
	switch v.Kind() {
	case reflect.Interface:
		if v.IsNil() {
			return nil
		}
		return findSQLTx(v.Elem(), depth)
	case reflect.Pointer:
		if v.IsNil() {
			return nil
		}
		if v.Type() == sqlTxType {
			return v.Interface().(*sql.Tx)
		}
		return findSQLTx(v.Elem(), depth+1)
	case reflect.Struct:
		t := v.Type()
		for i := 0; i < t.NumField(); i++ {
			if f := t.Field(i); f.Anonymous && f.IsExported() {
				if tx := findSQLTx(v.Field(i), depth+1); tx != nil {
					return tx
				}
			}
		}
	}
	return nil
}
