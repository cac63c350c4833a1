package semaphore

import (
	"database/sql"
	"errors"
	"strings"
	"testing"

	"github.com/syncguard/syncguard-go/driver"
	"github.com/syncguard/syncguard-go/syncguard"
)

// TestRender: every statement file renders for the longest table name,
// with no template text left, and the table and index names fit
// PostgreSQL's 63 bytes.
func TestRender(t *testing.T) {
	table := strings.Repeat("t", 51)
	entries, err := sqlFiles.ReadDir("sql")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		out := render(e.Name(), table)
		if strings.Contains(out, "{{") {
			t.Errorf("%s: template text left", e.Name())
		}
	}
	for k, v := range names(table) {
		if len(v) > 63 {
			t.Errorf("%s: %s is longer than 63 bytes", k, v)
		}
	}
	ddl, err := SchemaSQL(&syncguard.Config{TableName: table})
	if err != nil || !strings.Contains(ddl, `"`+table+`_sem_slots"`) {
		t.Fatalf("SchemaSQL: %v", err)
	}
}

// TestNewValidation: bad input is InvalidArgument before any I/O.
func TestNewValidation(t *testing.T) {
	db := sql.OpenDB(nil)
	for name, f := range map[string]func() error{
		"nil db":      func() error { _, err := New(nil, nil, 3); return err },
		"permits 0":   func() error { _, err := New(db, &syncguard.Config{Dialect: dialect{}}, 0); return err },
		"permits big": func() error { _, err := New(db, &syncguard.Config{Dialect: dialect{}}, MaxPermits+1); return err },
		"table":       func() error { _, err := New(db, &syncguard.Config{TableName: "bad name"}, 3); return err },
		"schema":      func() error { _, err := SchemaSQL(&syncguard.Config{TableName: "bad-name"}); return err },
	} {
		if err := f(); !errors.Is(err, syncguard.ErrInvalidArgument) {
			t.Errorf("%s: want InvalidArgument, got %v", name, err)
		}
	}
	s, err := New(db, &syncguard.Config{Dialect: dialect{}}, 3)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := t.Context()
	if _, err := s.Acquire(ctx, "", 0); !errors.Is(err, syncguard.ErrInvalidArgument) {
		t.Errorf("empty key: %v", err)
	}
	if _, err := s.Acquire(ctx, "k", 0); !errors.Is(err, syncguard.ErrInvalidArgument) {
		t.Errorf("ttl 0: %v", err)
	}
	if _, err := s.Release(ctx, "x"); !errors.Is(err, syncguard.ErrInvalidArgument) {
		t.Errorf("bad lockId: %v", err)
	}
	if _, err := s.Extend(ctx, "x", 1); !errors.Is(err, syncguard.ErrInvalidArgument) {
		t.Errorf("bad lockId (extend): %v", err)
	}
	if FenceKey("a", 2) != "a#2" {
		t.Error("FenceKey")
	}
}

type dialect struct{}

func (dialect) Name() string                       { return "test" }
func (dialect) Inspect(error) (i driver.ErrorInfo) { return }
