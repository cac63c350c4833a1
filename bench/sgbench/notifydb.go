package sgbench

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"reflect"
	"strings"

	"github.com/syncguard/syncguard-go/driver"
	"github.com/syncguard/syncguard-go/internal/rules"
	"github.com/syncguard/syncguard-go/syncguard"
)

// NotifyDatabase is the database of the same server that w7a's NotifyDB
// variant sends its notifications through.
const NotifyDatabase = "syncguard_notify"

// HasNotifyDB reports whether this syncguard's Config has the NotifyDB
// field (issue 29). The benchmark sets it by reflection, so that the same
// benchmark builds and runs against the core before and after it.
func HasNotifyDB() bool {
	f, ok := reflect.TypeFor[syncguard.Config]().FieldByName("NotifyDB")
	return ok && f.Type == reflect.TypeFor[*sql.DB]()
}

// ErrNoNotifyDB: the variant needs syncguard.Config.NotifyDB.
var ErrNoNotifyDB = errors.New("this syncguard has no Config.NotifyDB (issue 29)")

// setNotify opens p's notification pool on w.NotifyDSN and sets
// p.cfg.NotifyDB (and the dialect that listens through it).
func (w *WaitEnv) setNotify(p *proc) error {
	if !HasNotifyDB() {
		return ErrNoNotifyDB
	}
	if w.NotifyDSN == "" {
		return errors.New("VarNotifyDB needs WaitEnv.NotifyDSN")
	}
	open := w.OpenNotify
	if open == nil {
		open = func(dsn string) (*sql.DB, error) { return sql.Open(w.SQLDriver, dsn) }
	}
	ndb, err := open(w.NotifyDSN)
	if err != nil {
		return err
	}
	ndb.SetMaxOpenConns(2)
	ndb.SetMaxIdleConns(2)
	reflect.ValueOf(p.cfg).Elem().FieldByName("NotifyDB").Set(reflect.ValueOf(ndb))
	p.notify = ndb
	d := w.NotifyDialect
	if d == nil {
		d = w.Dialect
	}
	p.cfg.Dialect = d
	if l, ok := d.(driver.Listener); ok && w.Notified != nil {
		p.cfg.Dialect = countingDialect{fwdDialect{d}, l, w.Notified}
	}
	return nil
}

// CreateDatabase creates database name on db's server unless it exists.
func CreateDatabase(ctx context.Context, db *sql.DB, name string) error {
	var n int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM pg_database WHERE datname = $1`, name).Scan(&n); err != nil {
		return err
	}
	if n > 0 {
		return nil
	}
	_, err := db.ExecContext(ctx, `CREATE DATABASE `+rules.QuoteIdent(name))
	if err != nil && strings.Contains(err.Error(), "already exists") {
		return nil // created meanwhile by the other driver's run
	}
	return err
}

// DSNWithDatabase returns dsn (URL or keyword/value form) connecting to
// database name instead.
func DSNWithDatabase(dsn, name string) (string, error) {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return "", err
		}
		u.Path = "/" + name
		u.RawPath = ""
		return u.String(), nil
	}
	if strings.ContainsAny(name, " '\\") {
		return "", fmt.Errorf("database name %q needs quoting", name)
	}
	return dsn + " dbname=" + name, nil // the last value of a keyword wins
}
