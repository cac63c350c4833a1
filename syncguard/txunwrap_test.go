package syncguard

import (
	"context"
	"database/sql"
	"strings"
	"testing"

	"github.com/DATA-DOG/go-sqlmock"

	"github.com/syncguard/syncguard-go/internal/rules"
)

// GormTx (exported, like gorm.Tx) is the shape of GORM's transaction interface (gorm.Tx): the
// query methods and StmtContext, with a *sql.Tx behind it.
type GormTx interface {
	Tx
	StmtContext(ctx context.Context, stmt *sql.Stmt) *sql.Stmt
}

// preparingTx is shaped like GORM's *gorm.PreparedStmtTX: an embedded
// interface field holding the *sql.Tx, and query methods of its own that
// prepare the text and then count a driver's one-shot arguments as
// parameters. Here they fail, loudly.
type preparingTx struct {
	GormTx
	Other *int
}

func (*preparingTx) QueryRowContext(context.Context, string, ...any) *sql.Row {
	panic("a statement ran through the wrapper's QueryRowContext")
}

func (*preparingTx) QueryContext(context.Context, string, ...any) (*sql.Rows, error) {
	panic("a statement ran through the wrapper's QueryContext")
}

// rewritingTx is shaped like bun.Tx (a value type embedding *sql.Tx whose
// own query methods rewrite the query).
type rewritingTx struct {
	name string
	*sql.Tx
}

func (rewritingTx) QueryRowContext(context.Context, string, ...any) *sql.Row {
	panic("a statement ran through the wrapper's QueryRowContext")
}

// holdingTx holds a *sql.Tx without embedding it: not its transaction as
// far as syncguard can tell, so its own methods run the statements.
type holdingTx struct{ tx *sql.Tx }

func (h holdingTx) QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row {
	return h.tx.QueryRowContext(ctx, q, args...)
}

func (h holdingTx) QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	return h.tx.QueryContext(ctx, q, args...)
}

// WithTx runs the statements on the *sql.Tx a wrapper embeds (GORM's
// PrepareStmt transaction, bun.Tx, *sqlx.Tx), never through the wrapper's
// own query methods; a Tx that embeds none keeps its own.
func TestWithTxRunsOnTheEmbeddedSQLTx(t *testing.T) {
	db, mock, err := sqlmock.New(sqlmock.QueryMatcherOption(sqlmock.QueryMatcherFunc(func(expected, actual string) error {
		if !strings.Contains(actual, expected) {
			return sql.ErrNoRows
		}
		return nil
	})))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	b, _ := New(db, &Config{Dialect: fakeDialect{}, Logger: discardLogger(), DisablePrepare: true})
	mock.ExpectBegin()
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	var nilIface preparingTx
	for _, c := range []struct {
		name string
		tx   Tx
		want Tx
	}{
		{"*sql.Tx", tx, tx},
		{"GORM PreparedStmtTX shape", &preparingTx{GormTx: tx}, tx},
		{"bun.Tx shape", rewritingTx{name: "x", Tx: tx}, tx},
		{"*sqlx.Tx shape", &struct{ *sql.Tx }{tx}, tx},
		{"two levels", &struct{ GormTx }{&preparingTx{GormTx: tx}}, tx},
		{"holds, does not embed", holdingTx{tx}, holdingTx{tx}},
		{"embedded interface nil", &nilIface, &nilIface},
	} {
		if got := b.WithTx(c.tx).tx; got != c.want {
			t.Errorf("%s: WithTx runs statements on %T, want %T", c.name, got, c.want)
		}
	}

	// A release through GORM's shape, unprepared: it reaches the
	// *sql.Tx with its arguments as given.
	id := rules.GenerateLockID()
	mock.ExpectQuery("DELETE FROM").WithArgs(id, sqlmock.AnyArg(), sqlmock.AnyArg(), sqlmock.AnyArg()).
		WillReturnRows(sqlmock.NewRows([]string{"d", "s", "n", "k", "c", "l"}).AddRow(id, nil, int64(1), "0123456789abcdef", "ch", false))
	if _, err := b.WithTx(&preparingTx{GormTx: tx}).Release(context.Background(), id); err != nil {
		t.Fatalf("release through the wrapper's *sql.Tx: %v", err)
	}
	if err := mock.ExpectationsWereMet(); err != nil {
		t.Fatal(err)
	}
}
