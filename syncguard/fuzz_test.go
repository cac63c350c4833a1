package syncguard

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/syncguard/syncguard-go/driver"
)

func wantInvalid(t *testing.T, err error, what string) {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) || e.Code != CodeInvalidArgument {
		t.Fatalf("%s: invalid input must give a typed InvalidArgument, got %v", what, err)
	}
}

// FuzzCheckKey: every key is either accepted with its derived keys or
// rejected with an InvalidArgument *Error naming the operation and key,
// before any I/O. (The rules themselves are fuzzed in internal/rules.)
func FuzzCheckKey(f *testing.F) {
	for _, s := range []string{"k", "", "a\x00b", "\xff", "cafe\u0301", strings.Repeat("é", 300)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, key string) {
		k, e := checkKey("acquire", key)
		if e != nil {
			wantInvalid(t, e, "checkKey")
			if e.Op != "acquire" || e.Key != key {
				t.Fatalf("checkKey error must carry op and key, got %+v", e)
			}
			return
		}
		if k.Norm == "" || k.Storage == "" || k.Fence == "" {
			t.Fatalf("checkKey(%q) accepted with empty derived keys: %+v", key, k)
		}
	})
}

// FuzzClassify: any SQLSTATE-shaped string and kind classifies to a known
// code without panicking, and a cancelled context always wins.
func FuzzClassify(f *testing.F) {
	for _, s := range []string{"28P01", "57014", "08006", "53300", "40P01", "XX000", "", "2", "ZZZZZ"} {
		f.Add(s, 0, false)
	}
	f.Fuzz(func(t *testing.T, state string, kind int, cancelled bool) {
		d := constDialect{info: driver.ErrorInfo{SQLState: state, Kind: driver.Kind(kind)}}
		ctx, cancel := context.WithCancel(context.Background())
		if cancelled {
			cancel()
		}
		defer cancel()
		e := classifier{dialect: d}.wrap(ctx, "op", errors.New("driver error"))
		if cancelled && e.Code != CodeAborted {
			t.Fatalf("cancelled context must classify as Aborted, got %s", e.Code)
		}
		if e.Code.sentinel() == nil || e.Error() == "" {
			t.Fatal("unclassified error")
		}
	})
}

type constDialect struct{ info driver.ErrorInfo }

func (constDialect) Name() string                     { return "const" }
func (d constDialect) Inspect(error) driver.ErrorInfo { return d.info }
