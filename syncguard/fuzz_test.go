package syncguard

import (
	"errors"
	"strings"
	"testing"
)

func wantInvalid(t *testing.T, err error, what string) {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) || e.Code != ErrInvalidArgument {
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
