package itest_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/syncguard/syncguard-go/multilock"
	"github.com/syncguard/syncguard-go/tests/pgtest"
)

// TestMultiLockStatementFunctions: SetupSchema creates the three
// statement functions, through which a Locker's acquire, extend and
// release run without a warning; with the functions dropped (a schema of
// an earlier version) the same operations work through the statements
// themselves, with one warning.
func TestMultiLockStatementFunctions(t *testing.T) {
	srv := pgtest.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db := mlOpen(t, pgxDriver, srv.DSN)
	cfg := mlTables(t, ctx, db, pgxDriver.Dialect)
	tb, err := multilock.TablesOf(&cfg)
	if err != nil {
		t.Fatal(err)
	}
	round := func(l *multilock.Locker, name string) {
		t.Helper()
		set := multilock.Keys("funcs:"+name, "funcs:"+name+":b")
		r, err := l.Acquire(ctx, set, time.Minute)
		if err != nil || !r.OK {
			t.Fatalf("acquire: %+v, %v", r, err)
		}
		if x, err := l.Extend(ctx, r.LockID, time.Minute); err != nil || !x.OK {
			t.Fatalf("extend: %+v, %v", x, err)
		}
		if rr, err := l.Release(ctx, r.LockID); err != nil || !rr.OK {
			t.Fatalf("release: %+v, %v", rr, err)
		}
	}
	var count int
	funcs := `SELECT count(*) FROM pg_proc WHERE proname LIKE '` + strings.ReplaceAll(tb.Locks, "_", `\_`) + `\_op\_%'`
	if err := db.QueryRowContext(ctx, funcs).Scan(&count); err != nil || count != 3 {
		t.Fatalf("rule: SetupSchema creates the 3 statement functions; got %d, %v", count, err)
	}
	var logs bytes.Buffer
	var mu sync.Mutex
	c := cfg
	c.Logger = slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, nil))
	l, err := multilock.New(db, &c)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	round(l, "with")
	mu.Lock()
	if logs.Len() != 0 {
		t.Errorf("no warning while the functions serve; got %s", logs.String())
	}
	mu.Unlock()
	rows, err := db.QueryContext(ctx, `SELECT 'DROP FUNCTION ' || oid::regprocedure FROM pg_proc WHERE proname LIKE '`+
		strings.ReplaceAll(tb.Locks, "_", `\_`)+`\_op\_%'`)
	if err != nil {
		t.Fatal(err)
	}
	var drops []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		drops = append(drops, s)
	}
	rows.Close()
	for _, d := range drops {
		mustExec(ctx, t, db, d)
	}
	round(l, "without")
	round(l, "without again")
	mu.Lock()
	defer mu.Unlock()
	if n := strings.Count(logs.String(), "statement functions of this version are missing"); n != 1 {
		t.Errorf("rule: missing functions make the Locker send the statements, with one warning; got %d warnings: %s", n, logs.String())
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}
