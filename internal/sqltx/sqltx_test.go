package sqltx

import (
	"context"
	"database/sql"
	"testing"
)

type embeds struct{ *sql.Tx }

type Querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

type embedsIface struct{ Querier }

func TestUnwrap(t *testing.T) {
	tx := new(sql.Tx)
	for name, c := range map[string]struct {
		in   any
		want *sql.Tx
	}{
		"sql.Tx":             {tx, tx},
		"embedded":           {&embeds{tx}, tx},
		"embedded interface": {&embedsIface{&embeds{tx}}, tx},
		"other":              {&struct{ N int }{1}, nil},
		"nil":                {nil, nil},
	} {
		if got := Unwrap(c.in); got != c.want {
			t.Errorf("%s: got %p, want %p", name, got, c.want)
		}
	}
	if !IsNil(nil) || !IsNil((*sql.Tx)(nil)) || !IsNil((*embeds)(nil)) || IsNil(tx) {
		t.Errorf("IsNil")
	}
}
