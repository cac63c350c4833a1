// Package rules states each rule of the SyncGuard specification once, in
// code: the key limits and the key, storage-key and fence-key derivation,
// the lockId format, the fence format and its bounds, the liveness
// predicate with its tolerance, and the sanitized hash. docs/spec.md states
// the same rules in words and names each function or constant here.
//
// Every Go and SQL use of a rule goes through this package: the SQL
// fragments in sql.go are rendered into syncguard's statement files, so the
// server-time and liveness expressions are spelled nowhere else.
//
// The package is internal: users see the rules through the behaviour of
// package syncguard (and syncguard.HashKey, the one rule they call
// directly). Its functions return *ArgError for bad input, which syncguard
// turns into an InvalidArgument *syncguard.Error. The reference vectors
// (testdata/reference-vectors.json) are checked here.
package rules

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"iter"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// Limits and constants shared with every SyncGuard implementation. Changing
// any of them breaks interoperability (docs/spec.md).
const (
	// MaxKeyBytes is the longest user key, in UTF-8 bytes after NFC.
	MaxKeyBytes = 512
	// StorageKeyLimit is PostgreSQL's storage-key limit in bytes
	// (BACKEND_LIMITS.POSTGRES); longer keys take the hashed form.
	StorageKeyLimit = 1700
	// StorageKeyReserve is the reserve MakeStorageKey keeps for PostgreSQL
	// (RESERVE_BYTES.POSTGRES): its tables are separate, so none.
	StorageKeyReserve = 0
	// ToleranceMs is the liveness tolerance (TIME_TOLERANCE_MS): a lock is
	// live while expires_at_ms > now_ms - ToleranceMs.
	ToleranceMs = 1000
	// FenceDigits is the width of a fence: zero-padded decimal digits.
	FenceDigits = 15
	// FenceMax: an acquire whose fence would pass it fails (Internal) and
	// commits nothing (FENCE_THRESHOLDS.MAX).
	FenceMax = 900_000_000_000_000
	// FenceWarn: a fence above it is logged as a warning
	// (FENCE_THRESHOLDS.WARN).
	FenceWarn = 90_000_000_000_000
	// fenceFormatMax is the largest number FormatFence formats.
	fenceFormatMax = 999_999_999_999_999
	// LockIDBytes is the entropy of a lockId, from crypto/rand.
	LockIDBytes = 16
	// LockIDLen is the length of a lockId: base64url of LockIDBytes,
	// unpadded.
	LockIDLen = 22
	// DefaultTable and DefaultFenceTable are the default table names.
	DefaultTable      = "syncguard_locks"
	DefaultFenceTable = "syncguard_fence_counters"
	// CleanupGraceMs: the opportunistic cleanup (Config.CleanupInIsLocked)
	// deletes only rows that expired more than this long ago, well past the
	// tolerance, so it never races an extend of a live lock.
	CleanupGraceMs = 2000
	// AsyncReleaseMaxMs: a release on the pool commits without waiting for
	// the WAL flush only if the lock it deletes had at most this long left
	// to live, which bounds how long a crash can bring a released lock
	// back (syncguard's docs/design.md, "Durability of a release").
	AsyncReleaseMaxMs = 60000
)

// ArgError is a rule's rejection of its input. Msg is the reference
// implementation's message, word for word where the reference has one.
type ArgError struct {
	Op  string // the reference function: "normalizeKey", "makeStorageKey", ...
	Msg string
}

func (e *ArgError) Error() string { return e.Msg }

func argErr(op, msg string) *ArgError { return &ArgError{Op: op, Msg: msg} }

// IsLive is the spec's single liveness predicate, on the server's clock:
// a lock is live while expiresAtMs > nowMs - ToleranceMs.
func IsLive(expiresAtMs, nowMs int64) bool { return expiresAtMs > nowMs-ToleranceMs }

// FormatFence formats n as a FenceDigits-wide, zero-padded decimal fence.
// It fails for negative values and values of more than FenceDigits digits,
// as the reference formatFence does.
func FormatFence(n int64) (string, error) {
	if n < 0 {
		return "", argErr("formatFence", "Fence must be non-negative")
	}
	if n > fenceFormatMax {
		return "", argErr("formatFence", fmt.Sprintf("Fence exceeds 15-digit limit: %d", n))
	}
	var buf [FenceDigits]byte
	for i := FenceDigits - 1; i >= 0; i-- {
		buf[i] = byte('0' + n%10)
		n /= 10
	}
	return string(buf[:]), nil
}

// ParseFence parses a fence: exactly FenceDigits decimal digits.
func ParseFence(f string) (int64, error) {
	if len(f) != FenceDigits {
		return 0, argErr("fence", fmt.Sprintf("fence must have %d digits, got %d characters", FenceDigits, len(f)))
	}
	n, err := strconv.ParseInt(f, 10, 64)
	if err != nil || n < 0 {
		return 0, argErr("fence", fmt.Sprintf("fence must be %d decimal digits", FenceDigits))
	}
	return n, nil
}

// NormalizeKey returns the NFC form of key and checks that it is 1 to
// MaxKeyBytes UTF-8 bytes long. Invalid UTF-8, which no other SyncGuard
// implementation can represent, is rejected too.
func NormalizeKey(key string) (string, error) {
	if key == "" {
		return "", argErr("normalizeKey", "Key must not be empty")
	}
	if !utf8.ValidString(key) {
		return "", argErr("normalizeKey", "Key must be valid UTF-8")
	}
	n := norm.NFC.String(key)
	if len(n) > MaxKeyBytes {
		return "", argErr("normalizeKey", fmt.Sprintf("Key exceeds maximum length of %d bytes after normalization", MaxKeyBytes))
	}
	return n, nil
}

// MakeStorageKey is the spec's canonical storage-key function: prefix
// (trailing colons removed) + ":" + NFC(key) when that fits in
// limit-reserve UTF-8 bytes, otherwise prefix + ":" + base64url(first 16
// bytes of SHA-256(prefix + ":" + NFC(key))). Without a prefix there is no
// colon. It fails for an empty key, or when the prefix leaves no room.
func MakeStorageKey(prefix, key string, limit, reserve int) (string, error) {
	if key == "" {
		return "", argErr("makeStorageKey", "Key must not be empty")
	}
	key = norm.NFC.String(key)
	prefix = strings.TrimRight(prefix, ":")
	sep := 0
	if prefix != "" {
		sep = 1
	}
	if len(prefix)+sep+reserve > limit {
		return "", argErr("makeStorageKey", "Prefix exceeds backend limit after accounting for reserved bytes. Use a shorter prefix.")
	}
	prefixed := key
	if prefix != "" {
		prefixed = prefix + ":" + key
	}
	if len(prefixed)+reserve <= limit {
		return prefixed, nil
	}
	sum := sha256.Sum256([]byte(prefixed))
	hashed := base64.RawURLEncoding.EncodeToString(sum[:16])
	if prefix != "" {
		hashed = prefix + ":" + hashed
	}
	if len(hashed)+reserve > limit {
		return "", argErr("makeStorageKey", "Key exceeds backend limits even after hashing (prefix too long).")
	}
	return hashed, nil
}

// StorageKeys returns the PostgreSQL storage key and fence key of a
// normalized key, by the spec's two-step derivation (the fence key comes
// from the storage key, never from the user key):
//
//	storage = MakeStorageKey("", key, StorageKeyLimit, StorageKeyReserve)
//	fence   = MakeStorageKey("", "fence:"+storage, StorageKeyLimit, StorageKeyReserve)
func StorageKeys(normalizedKey string) (storageKey, fenceKey string, err error) {
	storageKey, err = MakeStorageKey("", normalizedKey, StorageKeyLimit, StorageKeyReserve)
	if err != nil {
		return "", "", err
	}
	fenceKey, err = MakeStorageKey("", "fence:"+storageKey, StorageKeyLimit, StorageKeyReserve)
	if err != nil {
		return "", "", err
	}
	return storageKey, fenceKey, nil
}

// Key is a user key with everything derived from it.
type Key struct {
	Norm    string // NFC form, also stored as user_key and key_debug
	Storage string // the lock row's primary key
	Fence   string // the fence counter's primary key
}

// DeriveKey applies the key rules in order: NormalizeKey, then the
// PostgreSQL rule that text cannot hold a NUL byte, then StorageKeys.
func DeriveKey(key string) (Key, error) {
	n, err := NormalizeKey(key)
	if err != nil {
		return Key{}, err
	}
	if strings.IndexByte(n, 0) >= 0 {
		return Key{}, argErr("normalizeKey", "Key must not contain a NUL byte (PostgreSQL text cannot store it)")
	}
	s, f, err := StorageKeys(n)
	if err != nil {
		return Key{}, err
	}
	return Key{Norm: n, Storage: s, Fence: f}, nil
}

// HashKey is the spec's sanitized identifier: 24 lowercase hex characters,
// three 32-bit polynomial hashes over the UTF-16 code units of NFC(s).
func HashKey(s string) string {
	if !isASCII(s) {
		s = norm.NFC.String(s)
	}
	var h1, h2, h3 uint32
	for u := range UTF16Units(s) {
		c := uint32(u)
		h1 = h1*31 + c
		h2 = h2*127 + 3*c
		h3 = h3*2047 + 7*c
	}
	const hexdigits = "0123456789abcdef"
	var out [24]byte
	for i, h := range [3]uint32{h1, h2, h3} {
		for j := 7; j >= 0; j-- {
			out[i*8+j] = hexdigits[h&0xf]
			h >>= 4
		}
	}
	return string(out[:])
}

// UTF16Units yields the UTF-16 code units of s in order, as a JavaScript
// string holds s (charCodeAt): a character outside the Basic Multilingual
// Plane as its two surrogates, invalid UTF-8 as U+FFFD. The reference
// implementation's string hashes run over these units.
func UTF16Units(s string) iter.Seq[uint16] {
	return func(yield func(uint16) bool) {
		for _, r := range s {
			if r >= 0x10000 {
				a, b := utf16.EncodeRune(r)
				if !yield(uint16(a)) || !yield(uint16(b)) {
					return
				}
			} else if !yield(uint16(r)) {
				return
			}
		}
	}
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// GenerateLockID returns a new lockId: LockIDBytes from crypto/rand,
// base64url without padding.
func GenerateLockID() string {
	var b [LockIDBytes]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+); it crashes the program instead.
	return EncodeLockID(b)
}

// EncodeLockID is the lockId encoding of b.
func EncodeLockID(b [LockIDBytes]byte) string {
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// ValidateLockID checks the spec's lockId format, ^[A-Za-z0-9_-]{22}$.
func ValidateLockID(id string) error {
	if len(id) != LockIDLen {
		return badLockID(id, -1)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return badLockID(id, i)
		}
	}
	return nil
}

// LockIDErrorPrefix starts every malformed-lockId message: the reference's
// message up to the point where it would print the input.
const LockIDErrorPrefix = "Invalid lockId format. Expected 22 base64url characters, got"

// badLockID builds the malformed-lockId message. A lockId is a bearer
// secret (whoever has it can release or extend the lock), so unlike the
// reference the message never shows the input: only its length, the offset
// of the first byte outside the alphabet (bad >= 0) and its HashKey.
func badLockID(id string, bad int) error {
	var msg string
	if bad < 0 {
		msg = fmt.Sprintf("%s %d bytes (lock#%s)", LockIDErrorPrefix, len(id), HashKey(strings.ToValidUTF8(id, "\uFFFD")))
	} else {
		msg = fmt.Sprintf("%s a byte outside [A-Za-z0-9_-] at offset %d (lock#%s)", LockIDErrorPrefix, bad, HashKey(strings.ToValidUTF8(id, "\uFFFD")))
	}
	return argErr("validateLockId", msg)
}
