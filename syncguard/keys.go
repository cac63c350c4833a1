package syncguard

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// Limits and defaults shared with the reference implementation. Changing any
// of them breaks interoperability with other SyncGuard implementations.
const (
	// MaxKeyBytes is the longest key accepted, in UTF-8 bytes after NFC.
	MaxKeyBytes = 512
	// PostgresKeyLimit is the longest storage key written to PostgreSQL,
	// in bytes; longer keys are replaced by a SHA-256 based form.
	PostgresKeyLimit = 1700
	// PostgresReserveBytes is the reserve passed to MakeStorageKey for
	// PostgreSQL (its tables are independent, so nothing is reserved).
	PostgresReserveBytes = 0
	// TimeToleranceMs is the liveness tolerance: a lock is live while
	// expires_at_ms > now_ms - TimeToleranceMs.
	TimeToleranceMs = 1000
	// FenceMax: an acquire whose fence would pass this value fails with
	// CodeInternal and commits nothing.
	FenceMax = 900_000_000_000_000
	// FenceWarn: fences above this value are logged as a warning.
	FenceWarn = 90_000_000_000_000
)

// Fence is a fencing token: a 15-digit, zero-padded decimal string that
// increases strictly with every successful acquire of the same key. Because
// every fence has the same width, fences compare correctly as strings:
//
//	if newFence > lastSeenFence { ... }
type Fence string

// Int64 parses the fence as a number.
func (f Fence) Int64() (int64, error) {
	if len(f) != 15 {
		return 0, invalidArg("fence", fmt.Sprintf("fence must have 15 digits, got %d characters", len(f)))
	}
	n, err := strconv.ParseInt(string(f), 10, 64)
	if err != nil || n < 0 {
		return 0, invalidArg("fence", "fence must be 15 decimal digits")
	}
	return n, nil
}

// FormatFence formats n as a 15-digit zero-padded Fence.
// It fails with InvalidArgument for negative values and values above
// 999999999999999, exactly as the reference formatFence.
func FormatFence(n int64) (Fence, error) {
	if n < 0 {
		return "", invalidArg("formatFence", "Fence must be non-negative")
	}
	if n > 999_999_999_999_999 {
		return "", invalidArg("formatFence", fmt.Sprintf("Fence exceeds 15-digit limit: %d", n))
	}
	var buf [15]byte
	for i := 14; i >= 0; i-- {
		buf[i] = byte('0' + n%10)
		n /= 10
	}
	return Fence(buf[:]), nil
}

// NormalizeKey returns the Unicode NFC form of key and checks that it is
// 1 to MaxKeyBytes UTF-8 bytes long. Go strings may hold invalid UTF-8,
// which no other SyncGuard implementation can represent; such keys are
// rejected too. All failures are InvalidArgument.
func NormalizeKey(key string) (string, error) {
	if key == "" {
		return "", invalidArg("normalizeKey", "Key must not be empty")
	}
	if !utf8.ValidString(key) {
		return "", invalidArg("normalizeKey", "Key must be valid UTF-8")
	}
	n := norm.NFC.String(key)
	if len(n) > MaxKeyBytes {
		return "", invalidArg("normalizeKey", fmt.Sprintf("Key exceeds maximum length of %d bytes after normalization", MaxKeyBytes))
	}
	return n, nil
}

// MakeStorageKey is the spec's canonical storage key function: prefix (with
// trailing colons removed) + ":" + NFC(key) when that fits in limit-reserve
// UTF-8 bytes, otherwise prefix + ":" + base64url(first 16 bytes of
// SHA-256(prefix + ":" + NFC(key))). Without a prefix there is no colon.
// It fails with InvalidArgument for an empty key, or when the prefix leaves no
// room for any key.
func MakeStorageKey(prefix, key string, limit, reserve int) (string, error) {
	if key == "" {
		return "", invalidArg("makeStorageKey", "Key must not be empty")
	}
	key = norm.NFC.String(key)
	prefix = strings.TrimRight(prefix, ":")
	sep := 0
	if prefix != "" {
		sep = 1
	}
	if len(prefix)+sep+reserve > limit {
		return "", invalidArg("makeStorageKey", "Prefix exceeds backend limit after accounting for reserved bytes. Use a shorter prefix.")
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
		return "", invalidArg("makeStorageKey", "Key exceeds backend limits even after hashing (prefix too long).")
	}
	return hashed, nil
}

// StorageKeys returns the PostgreSQL storage key and fence key for a
// normalized key, using the spec's two-step derivation:
//
//	base  = MakeStorageKey("", key, 1700, 0)
//	fence = MakeStorageKey("", "fence:"+base, 1700, 0)
func StorageKeys(normalizedKey string) (storageKey, fenceKey string, err error) {
	storageKey, err = MakeStorageKey("", normalizedKey, PostgresKeyLimit, PostgresReserveBytes)
	if err != nil {
		return "", "", err
	}
	fenceKey, err = MakeStorageKey("", "fence:"+storageKey, PostgresKeyLimit, PostgresReserveBytes)
	if err != nil {
		return "", "", err
	}
	return storageKey, fenceKey, nil
}

// HashKey is the spec's sanitized identifier: 24 lowercase hex characters,
// three 32-bit polynomial hashes over the UTF-16 code units of NFC(s).
// It is for logs, telemetry and UIs, not for security.
func HashKey(s string) string {
	if !isASCII(s) {
		s = norm.NFC.String(s)
	}
	var h1, h2, h3 uint32
	add := func(c uint32) {
		h1 = h1*31 + c
		h2 = h2*127 + 3*c
		h3 = h3*2047 + 7*c
	}
	for _, r := range s {
		if r >= 0x10000 {
			a, b := utf16.EncodeRune(r)
			add(uint32(a))
			add(uint32(b))
		} else {
			add(uint32(r))
		}
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

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// GenerateLockID returns a new lockId: 16 bytes from crypto/rand, base64url
// without padding (22 characters).
func GenerateLockID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+); it crashes the program instead.
	return encodeLockID(b)
}

func encodeLockID(b [16]byte) string {
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// ValidateLockID checks the spec's lockId format, ^[A-Za-z0-9_-]{22}$,
// and returns an InvalidArgument error otherwise.
func ValidateLockID(id string) error {
	if len(id) != 22 {
		return badLockID(id)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return badLockID(id)
		}
	}
	return nil
}

// IsLive is the spec's single liveness predicate: a lock is live while
// expiresAtMs > nowMs - toleranceMs.
func IsLive(expiresAtMs, nowMs, toleranceMs int64) bool {
	return expiresAtMs > nowMs-toleranceMs
}

// badLockID builds the reference's message; very long input is cut so a
// garbage argument cannot blow up logs.
func badLockID(id string) error {
	if len(id) > 64 {
		id = strings.ToValidUTF8(id[:64], "") + "..."
	}
	return invalidArg("validateLockId", "Invalid lockId format. Expected 22 base64url characters, got: "+id)
}
