package rules

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// seedKeys adds every input of the reference vectors to f's corpus.
func seedKeys(f *testing.F) {
	v := mustVectors(f)
	for _, h := range v.HashKey {
		f.Add(h.Input)
	}
	for _, m := range v.MakeStorageKey {
		f.Add(m.Key)
	}
	for _, n := range v.NormalizeAndValidateKey {
		f.Add(n.Input)
	}
	for _, l := range v.ValidateLockID {
		f.Add(l.Input)
	}
	f.Add("a\x00b")
	f.Add("\xff")
}

func wantInvalid(t *testing.T, err error, what string) {
	t.Helper()
	var e *ArgError
	if !errors.As(err, &e) || e.Msg == "" {
		t.Fatalf("%s: invalid input must give an *ArgError with a message, got %v", what, err)
	}
}

func FuzzNormalizeAndStorageKeys(f *testing.F) {
	seedKeys(f)
	f.Fuzz(func(t *testing.T, key string) {
		n, err := NormalizeKey(key)
		if err != nil {
			wantInvalid(t, err, "NormalizeKey")
			return
		}
		if n == "" || len(n) > MaxKeyBytes || !utf8.ValidString(n) || !norm.NFC.IsNormalString(n) {
			t.Fatalf("NormalizeKey(%q) = %q: not a 1..512-byte NFC string", key, n)
		}
		storage, fence, err := StorageKeys(n)
		if err != nil {
			t.Fatalf("StorageKeys of a valid key failed: %v", err)
		}
		if len(storage) > StorageKeyLimit || len(fence) > StorageKeyLimit || storage == "" || fence == "" {
			t.Fatalf("storage keys out of limits: %d, %d bytes", len(storage), len(fence))
		}
		if storage2, _, _ := StorageKeys(n); storage2 != storage {
			t.Fatal("StorageKeys is not deterministic")
		}
		k, err := DeriveKey(key)
		if err != nil {
			wantInvalid(t, err, "DeriveKey")
			if !strings.ContainsRune(n, 0) {
				t.Fatalf("DeriveKey rejected a storable key %q: %v", key, err)
			}
			return
		}
		if k.Norm != n || k.Storage != storage || k.Fence != fence {
			t.Fatalf("DeriveKey(%q) = %+v, want %q, %q, %q", key, k, n, storage, fence)
		}
	})
}

func FuzzMakeStorageKey(f *testing.F) {
	for _, m := range mustVectors(f).MakeStorageKey {
		f.Add(m.Prefix, m.Key, m.Limit, m.Reserve)
	}
	f.Fuzz(func(t *testing.T, prefix, key string, limit, reserve int) {
		if limit < 0 || limit > 4096 || reserve < 0 || reserve > 4096 || !utf8.ValidString(prefix) || !utf8.ValidString(key) {
			return
		}
		got, err := MakeStorageKey(prefix, key, limit, reserve)
		if err != nil {
			wantInvalid(t, err, "MakeStorageKey")
			return
		}
		if len(got)+reserve > limit {
			t.Fatalf("MakeStorageKey(%q, %q, %d, %d) = %d bytes, over the limit", prefix, key, limit, reserve, len(got))
		}
	})
}

func FuzzHashKey(f *testing.F) {
	seedKeys(f)
	f.Fuzz(func(t *testing.T, s string) {
		h := HashKey(s)
		if len(h) != 24 || strings.Trim(h, "0123456789abcdef") != "" {
			t.Fatalf("HashKey(%q) = %q: want 24 lowercase hex characters", s, h)
		}
		if utf8.ValidString(s) && HashKey(norm.NFD.String(s)) != h {
			t.Fatalf("HashKey must not depend on the normalization form of %q", s)
		}
	})
}

func FuzzValidateLockID(f *testing.F) {
	seedKeys(f)
	f.Fuzz(func(t *testing.T, id string) {
		err := ValidateLockID(id)
		valid := len(id) == LockIDLen && strings.Trim(id, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-") == ""
		if valid != (err == nil) {
			t.Fatalf("ValidateLockID(%q) = %v, want valid=%v", id, err, valid)
		}
		if err != nil {
			wantInvalid(t, err, "ValidateLockID")
		}
	})
}

func FuzzFormatFence(f *testing.F) {
	for _, v := range mustVectors(f).FormatFence {
		f.Add(int64(v.Input))
	}
	f.Fuzz(func(t *testing.T, n int64) {
		got, err := FormatFence(n)
		if n < 0 || n > 999_999_999_999_999 {
			wantInvalid(t, err, "FormatFence")
			return
		}
		back, err2 := ParseFence(got)
		if err != nil || len(got) != FenceDigits || err2 != nil || back != n {
			t.Fatalf("FormatFence(%d) = %q, %v (round trip %d, %v)", n, got, err, back, err2)
		}
	})
}
