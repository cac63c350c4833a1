package examples

import (
	"context"
	"database/sql"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"slices"
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

	_ "github.com/syncguard/syncguard-go/pgxstd" // registers "pgx" and its dialect
	"github.com/syncguard/syncguard-go/syncguard"
	"github.com/syncguard/syncguard-go/tests/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m, pgtest.Options{}) }

// orm is one ORM in one of its modes: open wraps the process's *sql.DB
// the way a service would, once, and returns its pair of examples.
type orm struct {
	name string
	open func(t *testing.T, db *sql.DB) ormExamples
}

type ormExamples struct {
	close  func(ctx context.Context, locks *syncguard.Backend, id int64) error
	create func(ctx context.Context, locks *syncguard.Backend, inv Invoice, then func() error) (string, error)
}

func gormOn(t *testing.T, db *sql.DB, prepare bool) *gorm.DB {
	gdb, err := gorm.Open(postgres.New(postgres.Config{Conn: db}), &gorm.Config{Logger: logger.Default.LogMode(logger.Silent), PrepareStmt: prepare})
	if err != nil {
		t.Fatal(err)
	}
	return gdb
}

// orms lists every ORM in every mode that changes how its transaction runs
// statements: GORM with PrepareStmt off (tx.Statement.ConnPool is a
// *sql.Tx) and on (a *gorm.PreparedStmtTX, which prepares what it runs).
// sqlx, bun and ent have no mode that prepares statements by itself.
func orms() []orm {
	gormORM := func(name string, prepare bool) orm {
		return orm{name: name, open: func(t *testing.T, db *sql.DB) ormExamples {
			gdb := gormOn(t, db, prepare)
			return ormExamples{
				close: func(ctx context.Context, locks *syncguard.Backend, id int64) error {
					return GORMCloseInvoice(ctx, gdb, locks, id)
				},
				create: func(ctx context.Context, locks *syncguard.Backend, inv Invoice, then func() error) (string, error) {
					return GORMCreateLocked(ctx, gdb, locks, inv, then)
				}}
		}}
	}
	return []orm{
		gormORM("gorm", false),
		gormORM("gorm_prepared", true),
		{name: "sqlx", open: func(t *testing.T, db *sql.DB) ormExamples {
			dbx := sqlx.NewDb(db, "pgx")
			return ormExamples{
				close: func(ctx context.Context, locks *syncguard.Backend, id int64) error {
					return SqlxCloseInvoice(ctx, dbx, locks, id)
				},
				create: func(ctx context.Context, locks *syncguard.Backend, inv Invoice, then func() error) (string, error) {
					return SqlxCreateLocked(ctx, dbx, locks, inv, then)
				}}
		}},
		{name: "bun", open: func(t *testing.T, db *sql.DB) ormExamples {
			bdb := bun.NewDB(db, pgdialect.New())
			return ormExamples{
				close: func(ctx context.Context, locks *syncguard.Backend, id int64) error {
					return BunCloseInvoice(ctx, bdb, locks, id)
				},
				create: func(ctx context.Context, locks *syncguard.Backend, inv Invoice, then func() error) (string, error) {
					return BunCreateLocked(ctx, bdb, locks, inv, then)
				}}
		}},
		{name: "ent", open: func(t *testing.T, db *sql.DB) ormExamples {
			drv := entsql.OpenDB(dialect.Postgres, db)
			return ormExamples{
				close: func(ctx context.Context, locks *syncguard.Backend, id int64) error {
					return EntCloseInvoice(ctx, drv, locks, id)
				},
				create: func(ctx context.Context, locks *syncguard.Backend, inv Invoice, then func() error) (string, error) {
					return EntCreateLocked(ctx, db, locks, inv, then)
				}}
		}},
	}
}

// helperEnv, set in a child process of TestORMExamples, names the ORM mode
// and syncguard's statement mode the child runs ("gorm_prepared/unprepared").
const helperEnv = "SYNCGUARD_EXAMPLES_HELPER"

// syncguardModes: syncguard's own statement modes, prepared (the default)
// and unprepared (Config.DisablePrepare, as behind a pooler).
var syncguardModes = []string{"prepared", "unprepared"}

// TestORMExamples runs each ORM's examples against the test PostgreSQL,
// cold: every ORM mode, with syncguard's statements prepared and
// unprepared, in a fresh process of its own (this test binary, running
// TestHelperORMExample), whose very first syncguard statement is the
// acquire inside the ORM's transaction. Nothing is prepared or cached
// beforehand, by syncguard, the ORM or the driver.
func TestORMExamples(t *testing.T) {
	if os.Getenv(helperEnv) != "" {
		t.Skip("helper run")
	}
	srv := pgtest.Require(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range orms() {
		for _, sm := range syncguardModes {
			mode := o.name + "/" + sm
			t.Run(mode, func(t *testing.T) {
				t.Parallel()
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
				defer cancel()
				dsn, err := srv.CreateDatabase(ctx, "examples_"+o.name+"_"+sm)
				if err != nil {
					t.Fatal(err)
				}
				cmd := exec.CommandContext(ctx, exe, "-test.run=^TestHelperORMExample$", "-test.v", "-test.count=1")
				cmd.Env = append(os.Environ(), helperEnv+"="+mode, pgtest.EnvDSN+"="+dsn)
				out, err := cmd.CombinedOutput()
				if err != nil || !strings.Contains(string(out), "--- PASS: TestHelperORMExample") {
					t.Fatalf("%s in a fresh process: %v\n%s", mode, err, out)
				}
			})
		}
	}
}

// TestHelperORMExample is the child process of TestORMExamples: one ORM
// mode and one syncguard statement mode (helperEnv), on the database in
// SYNCGUARD_TEST_DSN.
func TestHelperORMExample(t *testing.T) {
	mode := os.Getenv(helperEnv)
	if mode == "" {
		t.Skip("helper: run by TestORMExamples")
	}
	name, sm, _ := strings.Cut(mode, "/")
	var o *orm
	for _, c := range orms() {
		if c.name == name {
			o = &c
		}
	}
	if o == nil || !slices.Contains(syncguardModes, sm) {
		t.Fatalf("unknown mode %q", mode)
	}
	srv := pgtest.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db, err := sql.Open("pgx", srv.DSN)
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
	locks, err := syncguard.New(db, &syncguard.Config{DisablePrepare: sm == "unprepared"})
	if err != nil {
		t.Fatal(err)
	}
	ex := o.open(t, db)
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

	// First, cold: a lock taken in the ORM's transaction rolls back with it.
	boom := errors.New("a later step failed")
	id, err := ex.create(ctx, locks, Invoice{ID: 3, Status: "open"}, func() error { return boom })
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
	id, err = ex.create(ctx, locks, Invoice{ID: 3, Status: "open"}, func() error { return nil })
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if _, _, ok := row(3); !ok {
		t.Errorf("the committed insert is missing")
	}
	if info, err := locks.LookupID(ctx, id); err != nil || info == nil || info.Fence != "000000000000001" {
		t.Errorf("the committed transaction's lock: %+v, %v (want fence 1: the rolled-back acquire's fence was returned)", info, err)
	}

	// WithLock around a job that writes with the fence.
	if err := ex.close(ctx, locks, 1); err != nil {
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
	if err := ex.close(ctx, locks, 2); !errors.Is(err, ErrStaleFence) {
		t.Errorf("a write with a smaller fence than the row's: got %v, want ErrStaleFence", err)
	}
	if s, f, _ := row(2); s != "paid" || f != "000000000000900" {
		t.Errorf("a refused write changed the row: status %q fence %q", s, f)
	}

	// Again in a transaction, now that the pool has run (and, prepared,
	// prepared) the statements.
	id4, err := ex.create(ctx, locks, Invoice{ID: 4, Status: "open"}, func() error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{id, id4} {
		if rel, err := locks.Release(ctx, id); err != nil || !rel.OK {
			t.Errorf("release: %+v, %v", rel, err)
		}
	}
}

// TestDocsShowTheExamples: every exported function of this package, and
// every helper they share (examples.go), appears in docs/orm.md exactly as
// written here, so the documentation cannot drift from code that runs.
func TestDocsShowTheExamples(t *testing.T) {
	doc, err := os.ReadFile("../docs/orm.md")
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
