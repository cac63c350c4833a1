package syncguard

import (
	"database/sql"
	"reflect"
)

// unwrapSQLTx returns the *sql.Tx that tx (an ORM's wrapper) is, or embeds
// (*sqlx.Tx, bun.Tx), directly or in an embedded interface field (GORM's
// *gorm.PreparedStmtTX), maxTxDepth levels deep at most; else nil. The
// wrapper's own methods may prepare what they run (GORM's PrepareStmt:
// "sql: expected 6 arguments, got 7" with one-shot arguments, and a named
// statement a pooler loses) or rewrite it (bun expands "?").
func unwrapSQLTx(tx any) *sql.Tx { return findSQLTx(reflect.ValueOf(tx), 0) }

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
