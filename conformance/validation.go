package conformance

import (
	"strings"
	"time"

	"github.com/syncguard/syncguard-go/internal/rules"
	"github.com/syncguard/syncguard-go/syncguard"
)

// Validation happens before any I/O: these cases run on Target.Unreachable
// (for PostgreSQL a Backend whose *sql.DB is already closed), where any I/O
// would fail with a non-InvalidArgument error.

// maxKeyBytes is the spec's key limit, in UTF-8 bytes after NFC.
const maxKeyBytes = 512

func init() {
	register("Validation/InvalidInputRejectedBeforeIO", func(e *env) {
		e.skipUnless(e.tg.Unreachable != nil, "Unreachable")
		b := e.tg.Unreachable
		goodKey, goodID := e.key("valid"), rules.GenerateLockID()
		badKeys := map[string]string{
			"empty key":                    "",
			"513 bytes":                    strings.Repeat("a", 513),
			"513 bytes after NFC":          strings.Repeat("é", 256) + "a",
			"512 bytes that grow with NFC": strings.Repeat("\u0958", 170) + "ab", // U+0958 is excluded from composition: 3 bytes become 6
			"NUL byte":                     "a\x00b",
			"invalid UTF-8":                "a\xffb",
			"lone surrogate half":          "a\xed\xa0\x80b",
		}
		for name, k := range badKeys {
			for op, err := range keyOps(e.ctx, b, k, time.Second) {
				if !errIs(err, syncguard.ErrInvalidArgument) {
					e.t.Errorf("rule: %s rejects an invalid key (%s) with ErrInvalidArgument before any I/O; got %v", op, name, err)
				}
			}
		}
		badIDs := map[string]string{
			"empty":              "",
			"21 characters":      strings.Repeat("A", 21),
			"23 characters":      strings.Repeat("A", 23),
			"'+' (base64 std)":   strings.Repeat("A", 21) + "+",
			"'/' (base64 std)":   strings.Repeat("A", 21) + "/",
			"'=' padding":        strings.Repeat("A", 20) + "==",
			"space":              strings.Repeat("A", 21) + " ",
			"non-ASCII":          strings.Repeat("A", 20) + "é",
			"NUL byte":           strings.Repeat("A", 21) + "\x00",
			"SQL metacharacters": "';DROP TABLE x;--AAAAAA",
		}
		for name, id := range badIDs {
			for op, err := range idOps(e.ctx, b, id, time.Second) {
				if !errIs(err, syncguard.ErrInvalidArgument) {
					e.t.Errorf("rule: %s rejects a malformed lockId (%s, %q) with ErrInvalidArgument before any I/O; got %v", op, name, id, err)
				}
			}
		}
		badTTLs := []time.Duration{0, -time.Second, time.Nanosecond, 999 * time.Microsecond}
		for _, ttl := range badTTLs {
			if _, err := b.Acquire(e.ctx, goodKey, ttl); !errIs(err, syncguard.ErrInvalidArgument) {
				e.t.Errorf("rule: acquire rejects ttl %v (below 1 ms) with ErrInvalidArgument before any I/O; got %v", ttl, err)
			}
			if _, err := b.Extend(e.ctx, goodID, ttl); !errIs(err, syncguard.ErrInvalidArgument) {
				e.t.Errorf("rule: extend rejects ttl %v (below 1 ms) with ErrInvalidArgument before any I/O; got %v", ttl, err)
			}
		}
		// Control: valid input on this Backend does reach the closed pool.
		if _, err := b.Acquire(e.ctx, goodKey, time.Second); err == nil || errIs(err, syncguard.ErrInvalidArgument) {
			e.t.Errorf("setup: valid input on Target.Unreachable must fail with a non-InvalidArgument error (else this case proves nothing); got %v", err)
		}
	})

	register("Validation/ErrorsNeverLeakKeyOrLockID", func(e *env) {
		e.skipUnless(e.tg.Unreachable != nil, "Unreachable")
		b := e.tg.Unreachable
		k, id := e.key("secretkeyvalue"), rules.GenerateLockID()
		for op, err := range map[string]error{
			"Acquire": second(b.Acquire(e.ctx, k, 0)),
			"Extend":  second(b.Extend(e.ctx, id, 0)),
			"Release": second(b.Release(e.ctx, id)),
			"IsLocked (I/O error)": func() error {
				_, err := b.IsLocked(e.ctx, k)
				return err
			}(),
		} {
			if err == nil {
				e.t.Errorf("setup: %s on Target.Unreachable must fail", op)
				continue
			}
			if msg := err.Error(); strings.Contains(msg, k) || strings.Contains(msg, id) {
				e.t.Errorf("rule: error messages show keys and lockIds only as hashes; %s error: %s", op, msg)
			}
		}
	})

	register("Validation/KeyLengthCountedAfterNFC", func(e *env) {
		keys := map[string]string{
			"512 ASCII bytes":              strings.Repeat("k", 512-len(e.key(""))) + e.key(""),
			"256 two-byte characters":      strings.Repeat("é", 250) + randHex(6),
			"600 bytes, 400 after NFC":     strings.Repeat("e\u0301", 194) + randHex(6),
			"a key with every script kind": "ключ-鍵-🔑-" + randHex(6),
		}
		for name, k := range keys {
			norm := nfc(k)
			if len(norm) > maxKeyBytes {
				e.t.Fatalf("setup: test key %s is %d bytes after NFC", name, len(norm))
			}
			r, err := e.b.Acquire(e.ctx, k, 30*time.Second)
			if err != nil || !r.OK {
				e.t.Errorf("rule: a key of at most %d bytes after NFC is valid; %s (%d bytes, %d after NFC) got %+v, %v", maxKeyBytes, name, len(k), len(norm), r, err)
				continue
			}
			info, err := e.b2.LookupKey(e.ctx, k)
			if err != nil || info == nil || info.KeyHash != syncguard.HashKey(norm) || !e.isLocked(e.b2, k) {
				e.t.Errorf("rule: a long or non-ASCII key works for every operation; %s: lookup %+v, %v", name, info, err)
			}
			if rel := e.release(e.b2, r.LockID); !rel.OK {
				e.t.Errorf("rule: the holder's release succeeds; %s got %+v", name, rel)
			}
		}
	})

	register("Validation/UnicodeFormsAreOneLock", func(e *env) {
		suffix := randHex(6)
		composed, decomposed := "caf\u00e9:"+suffix, "cafe\u0301:"+suffix
		r := e.mustAcquire(e.b, decomposed, 30*time.Second)
		if c := e.acquire(e.b2, composed, 30*time.Second); c.OK {
			e.t.Errorf("rule: keys equal under NFC are the same lock; composed é acquired while decomposed é is held (fences %s and %s)", r.Fence, c.Fence)
		}
		if !e.isLocked(e.b2, composed) {
			e.t.Errorf("rule: keys equal under NFC are the same lock; IsLocked(composed) = false while decomposed is held")
		}
		a, _ := e.b2.LookupKey(e.ctx, composed)
		b, _ := e.b2.LookupKey(e.ctx, decomposed)
		if a == nil || b == nil || *a != *b || a.KeyHash != syncguard.HashKey(composed) {
			e.t.Errorf("rule: lookups of NFC-equal keys return the same lock, hashed in NFC; composed %+v, decomposed %+v", a, b)
		}
		e.release(e.b, r.LockID)
		if e.isLocked(e.b2, composed) {
			e.t.Errorf("rule: releasing the decomposed form frees the composed form")
		}
	})

	registerSQL("Validation/ConfigRejectedAtNew", func(e *sqlEnv) {
		db := e.closedDB()
		cases := map[string]*syncguard.Config{
			"table name with a dash":         {TableName: "bad-name"},
			"table name with a quote":        {TableName: `x"; DROP TABLE y; --`},
			"table name starting with digit": {TableName: "1locks"},
			"table name of 52 bytes":         {TableName: strings.Repeat("t", 52)},
			"fence table name with a dot":    {FenceTableName: "public.fences"},
			"same lock and fence table":      {TableName: "sg_same", FenceTableName: "sg_same"},
			"same tables up to case":         {TableName: "sg_same", FenceTableName: "SG_SAME"},
		}
		for name, bad := range cases {
			cfg := e.config(bad.TableName, bad.FenceTableName)
			if _, err := syncguard.New(db, cfg); !errIs(err, syncguard.ErrInvalidArgument) {
				e.t.Errorf("rule: New rejects a bad configuration (%s) with ErrInvalidArgument; got %v", name, err)
			}
			if err := syncguard.SetupSchema(e.ctx, db, cfg); !errIs(err, syncguard.ErrInvalidArgument) {
				e.t.Errorf("rule: SetupSchema rejects a bad configuration (%s) with ErrInvalidArgument before any I/O; got %v", name, err)
			}
		}
		if _, err := syncguard.New(nil, nil); !errIs(err, syncguard.ErrInvalidArgument) {
			e.t.Errorf("rule: New(nil db) fails with ErrInvalidArgument; got %v", err)
		}
	})
}
