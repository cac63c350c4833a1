package syncguard

import (
	"context"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"

	"github.com/syncguard/syncguard-go/driver"
)

// seeds adds every input of the reference vectors to f's corpus.
func seedKeys(f *testing.F) {
	v := loadVectorsF(f)
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

func loadVectorsF(f *testing.F) *referenceVectors { return mustVectors(f) }

func wantInvalid(t *testing.T, err error, what string) {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) || e.Code != CodeInvalidArgument {
		t.Fatalf("%s: invalid input must give a typed InvalidArgument, got %v", what, err)
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
		if len(storage) > PostgresKeyLimit || len(fence) > PostgresKeyLimit || storage == "" || fence == "" {
			t.Fatalf("storage keys out of limits: %d, %d bytes", len(storage), len(fence))
		}
		if storage2, _, _ := StorageKeys(n); storage2 != storage {
			t.Fatal("StorageKeys is not deterministic")
		}
		if _, _, _, err := checkKey("acquire", key); err != nil {
			wantInvalid(t, err, "checkKey")
			if !strings.ContainsRune(n, 0) {
				t.Fatalf("checkKey rejected a storable key %q: %v", key, err)
			}
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
		valid := len(id) == 22 && strings.Trim(id, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-") == ""
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
		back, err2 := got.Int64()
		if err != nil || len(got) != 15 || err2 != nil || back != n {
			t.Fatalf("FormatFence(%d) = %q, %v (round trip %d, %v)", n, got, err, back, err2)
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
