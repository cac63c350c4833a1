package examples

import (
	"context"
	"database/sql"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strings"
	"testing"
	"time"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
	"github.com/jmoiron/sqlx"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/syncguard/syncguard-go/internal/pgtest"
	_ "github.com/syncguard/syncguard-go/pgxstd" // registers "pgx" and its dialect
	"github.com/syncguard/syncguard-go/syncguard"
)

func TestMain(m *testing.M) { pgtest.Main(m, pgtest.Options{}) }

// orm is one ORM's pair of examples, each on an existing *sql.DB.
type orm struct {
	name   string
	close  func(ctx context.Context, db *sql.DB, locks *syncguard.Backend, id int64) error
	create func(ctx context.Context, db *sql.DB, locks *syncguard.Backend, inv Invoice, then func() error) (string, error)
}

func gormOn(t *testing.T, db *sql.DB, prepare bool) *gorm.DB {
	gdb, err := gorm.Open(postgres.New(postgres.Config{Conn: db}), &gorm.Config{Logger: logger.Default.LogMode(logger.Silent), PrepareStmt: prepare})
	if err != nil {
		t.Fatal(err)
	}
	return gdb
}

func orms(t *testing.T) []orm {
	gormORM := func(name string, prepare bool) orm {
		return orm{name: name,
			close: func(ctx context.Context, db *sql.DB, locks *syncguard.Backend, id int64) error {
				return GORMCloseInvoice(ctx, gormOn(t, db, prepare), locks, id)
			},
			create: func(ctx context.Context, db *sql.DB, locks *syncguard.Backend, inv Invoice, then func() error) (string, error) {
				return GORMCreateLocked(ctx, gormOn(t, db, prepare), locks, inv, then)
			}}
	}
	return []orm{
		gormORM("gorm", false),
		gormORM("gorm_prepared", true), // tx.Statement.ConnPool is *gorm.PreparedStmtTX
		{name: "sqlx",
			close: func(ctx context.Context, db *sql.DB, locks *syncguard.Backend, id int64) error {
				return SqlxCloseInvoice(ctx, sqlx.NewDb(db, "pgx"), locks, id)
			},
			create: func(ctx context.Context, db *sql.DB, locks *syncguard.Backend, inv Invoice, then func() error) (string, error) {
				return SqlxCreateLocked(ctx, sqlx.NewDb(db, "pgx"), locks, inv, then)
			}},
		{name: "bun",
			close: func(ctx context.Context, db *sql.DB, locks *syncguard.Backend, id int64) error {
				return BunCloseInvoice(ctx, bun.NewDB(db, pgdialect.New()), locks, id)
			},
			create: func(ctx context.Context, db *sql.DB, locks *syncguard.Backend, inv Invoice, then func() error) (string, error) {
				return BunCreateLocked(ctx, bun.NewDB(db, pgdialect.New()), locks, inv, then)
			}},
		{name: "ent",
			close: func(ctx context.Context, db *sql.DB, locks *syncguard.Backend, id int64) error {
				return EntCloseInvoice(ctx, entsql.OpenDB(dialect.Postgres, db), locks, id)
			},
			create: EntCreateLocked},
	}
}

// TestORMExamples runs each ORM's examples against the test PostgreSQL:
// WithLock around a write with the fence (and a stale fence refused), a
// lock taken in the ORM's transaction that a rollback undoes and a commit
// keeps.
func TestORMExamples(t *testing.T) {
	srv := pgtest.Require(t)
	for _, o := range orms(t) {
		t.Run(o.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			dsn, err := srv.CreateDatabase(ctx, "examples_"+o.name)
			if err != nil {
				t.Fatal(err)
			}
			db, err := sql.Open("pgx", dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			for _, q := range []string{`DROP TABLE IF EXISTS invoices, syncguard_locks, syncguard_fence_counters`,
				`CREATE TABLE invoices (id bigint PRIMARY KEY, status text NOT NULL, fence text)`,
				`INSERT INTO invoices (id, status) VALUES (1, 'open'), (2, 'open')`} {
				if _, err := db.ExecContext(ctx, q); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			}
			if err := syncguard.SetupSchema(ctx, db, nil); err != nil {
				t.Fatal(err)
			}
			locks, err := syncguard.New(db, nil)
			if err != nil {
				t.Fatal(err)
			}
			row := func(id int64) (status, fence string, ok bool) {
				var f sql.NullString
				err := db.QueryRowContext(ctx, `SELECT status, fence FROM invoices WHERE id = $1`, id).Scan(&status, &f)
				if errors.Is(err, sql.ErrNoRows) {
					return "", "", false
				}
				if err != nil {
					t.Fatal(err)
				}
				return status, f.String, true
			}

			// WithLock around a job that writes with the fence.
			if err := o.close(ctx, db, locks, 1); err != nil {
				t.Fatalf("closing invoice 1 under its lock: %v", err)
			}
			if s, f, _ := row(1); s != "closed" || f != "000000000000001" {
				t.Errorf("invoice 1 after the job: status %q fence %q, want closed with fence 000000000000001", s, f)
			}
			if locked, _ := locks.IsLocked(ctx, lockKey(1)); locked {
				t.Errorf("WithLock released the lock after the job: still locked")
			}
			// A newer holder wrote with a greater fence: this job's write is
			// refused, and changes nothing.
			if _, err := db.ExecContext(ctx, `UPDATE invoices SET status = 'paid', fence = '000000000000900' WHERE id = 2`); err != nil {
				t.Fatal(err)
			}
			if err := o.close(ctx, db, locks, 2); !errors.Is(err, ErrStaleFence) {
				t.Errorf("a write with a smaller fence than the row's: got %v, want ErrStaleFence", err)
			}
			if s, f, _ := row(2); s != "paid" || f != "000000000000900" {
				t.Errorf("a refused write changed the row: status %q fence %q", s, f)
			}

			// A lock taken in the ORM's transaction rolls back with it.
			boom := errors.New("a later step failed")
			id, err := o.create(ctx, db, locks, Invoice{ID: 3, Status: "open"}, func() error { return boom })
			if !errors.Is(err, boom) || id == "" {
				t.Fatalf("create with a failing later step: lockId %q, err %v", id, err)
			}
			if _, _, ok := row(3); ok {
				t.Errorf("the rolled-back transaction's insert is there")
			}
			if locked, err := locks.IsLocked(ctx, lockKey(3)); err != nil || locked {
				t.Errorf("the lock taken in a rolled-back transaction is held: %v, %v", locked, err)
			}
			if info, _ := locks.LookupID(ctx, id); info != nil {
				t.Errorf("the rolled-back lockId is live: %+v", info)
			}
			// ... and commits with it.
			id, err = o.create(ctx, db, locks, Invoice{ID: 3, Status: "open"}, func() error { return nil })
			if err != nil {
				t.Fatalf("create: %v", err)
			}
			if _, _, ok := row(3); !ok {
				t.Errorf("the committed insert is missing")
			}
			if info, err := locks.LookupID(ctx, id); err != nil || info == nil || info.Fence != "000000000000001" {
				t.Errorf("the committed transaction's lock: %+v, %v (want fence 1: the rolled-back acquire's fence was returned)", info, err)
			}
			if _, err := o.create(ctx, db, locks, Invoice{ID: 4, Status: "open"}, func() error { return nil }); err != nil {
				t.Fatal(err)
			}
			if rel, err := locks.Release(ctx, id); err != nil || !rel.OK {
				t.Errorf("release: %+v, %v", rel, err)
			}
		})
	}
}

// TestDocsShowTheExamples: every exported function of this package, and
// every helper they share (examples.go), appears in docs/orm.md exactly as
// written here, so the documentation cannot drift from code that runs.
func TestDocsShowTheExamples(t *testing.T) {
	doc, err := os.ReadFile("../../docs/orm.md")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, file := range []string{"gorm.go", "sqlx.go", "bun.go", "ent.go", "examples.go"} {
		src, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(fset, file, src, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || !fn.Name.IsExported() && file != "examples.go" {
				continue
			}
			text := string(src[fset.Position(fn.Pos()).Offset:fset.Position(fn.End()).Offset])
			if !strings.Contains(string(doc), text) {
				t.Errorf("docs/orm.md does not show %s.%s as written in %s:\n%s", "examples", fn.Name.Name, file, text)
			}
		}
	}
}
