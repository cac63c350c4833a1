// Package sqltx finds the *sql.Tx inside a caller's transaction value (an
// ORM's wrapper), for syncguard.Backend.WithTx and txguard's Hold.
package sqltx

import (
	"database/sql"
	"reflect"
)

// Unwrap returns the *sql.Tx that tx (an ORM's wrapper) is, or embeds
// (*sqlx.Tx, bun.Tx), directly or in an embedded interface field (GORM's
// *gorm.PreparedStmtTX), maxDepth levels deep at most; else nil. The
// wrapper's own methods may prepare what they run (GORM's PrepareStmt:
// "sql: expected 6 arguments, got 7" with one-shot arguments, and a named
// statement a pooler loses) or rewrite it (bun expands "?").
func Unwrap(tx any) *sql.Tx { return find(reflect.ValueOf(tx), 0) }

// IsNil reports whether tx is nil or a nil pointer (a nil *sql.Tx, a nil
// *sqlx.Tx, ...).
func IsNil(tx any) bool {
	if tx == nil {
		return true
	}
	v := reflect.ValueOf(tx)
	return v.Kind() == reflect.Pointer && v.IsNil()
}

const maxDepth = 4

var sqlTxType = reflect.TypeFor[*sql.Tx]()

func find(v reflect.Value, depth int) *sql.Tx {
	if !v.IsValid() || depth > maxDepth {
		return nil
	}
	switch v.Kind() {
	case reflect.Interface:
		if v.IsNil() {
			return nil
		}
		return find(v.Elem(), depth)
	case reflect.Pointer:
		if v.IsNil() {
			return nil
		}
		if v.Type() == sqlTxType {
			return v.Interface().(*sql.Tx)
		}
		return find(v.Elem(), depth+1)
	case reflect.Struct:
		t := v.Type()
		for i := 0; i < t.NumField(); i++ {
			if f := t.Field(i); f.Anonymous && f.IsExported() {
				if tx := find(v.Field(i), depth+1); tx != nil {
					return tx
				}
			}
		}
	}
	return nil
}
