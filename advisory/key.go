package advisory

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/syncguard/syncguard-go/internal/rules"
	"github.com/syncguard/syncguard-go/syncguard"
)

// form tells which of PostgreSQL's two advisory key spaces a Key is in.
type form uint8

const (
	formNone  form = iota
	formInt64      // pg_advisory_*(bigint)
	formPair       // pg_advisory_*(int4, int4)
)

// Key identifies one PostgreSQL advisory lock. PostgreSQL has two key
// spaces that never overlap: one 64-bit key (the bigint functions, pg_locks
// objsubid 1) and a pair of 32-bit keys (the (int4, int4) functions,
// objsubid 2). A Key remembers which one it is in.
//
// Make a Key with ID, Pair, FromName, FromLegacyFNV1a32 or, for declared
// locks, Declared.Key. The zero Key is invalid: every lock operation
// rejects it with InvalidArgument.
//
// A Key obtained from a Registry also carries its declaration (Name, Kind);
// == compares that too. Use Same to ask whether two Keys are the same
// PostgreSQL lock.
type Key struct {
	form form
	id   int64 // formPair: int64(k1)<<32 | int64(uint32(k2))
	decl *Declared
}

// ID is the Key of the 64-bit form, as in pg_advisory_xact_lock(id). Use it
// for ids an existing scheme already hands to the bigint functions, such as
// a hard-coded 42424242 or the result of an FNV hash.
func ID(id int64) Key { return Key{form: formInt64, id: id} }

// Pair is the Key of the two-int32 form, as in pg_advisory_xact_lock(k1, k2).
// Pair(1, 2) is a different lock from every ID.
func Pair(k1, k2 int32) Key {
	return Key{form: formPair, id: int64(k1)<<32 | int64(uint32(k2))}
}

// FromName derives a 64-bit key from a namespaced name: the first 8 bytes of
// SHA-256(namespace + "\x00" + name), read as a big-endian signed int64.
//
// The hash is over the UTF-8 bytes as given (no Unicode normalization).
// With 2^64 possible ids, the chance that any two of n distinct names
// collide is about n²/2^65: about 2.7e-8 for a million names. The same id
// can be computed in SQL (for psql sessions and other languages):
//
//	SELECT ('x' || left(encode(sha256(convert_to(:'ns', 'UTF8') || decode('00', 'hex')
//	        || convert_to(:'name', 'UTF8')), 'hex'), 16))::bit(64)::bigint;
//
// namespace must be non-empty valid UTF-8 without NUL bytes (so that
// namespace and name cannot be shifted into one another); name must be
// non-empty valid UTF-8. Other input is InvalidArgument.
func FromName(namespace, name string) (Key, error) {
	const op = "advisory.fromName"
	if err := checkNamespace(op, namespace); err != nil {
		return Key{}, err
	}
	if name == "" {
		return Key{}, invalidArg(op, "name must not be empty")
	}
	if !utf8.ValidString(name) {
		return Key{}, invalidArg(op, "name must be valid UTF-8")
	}
	return ID(nameID(namespace, name)), nil
}

func checkNamespace(op, namespace string) error {
	switch {
	case namespace == "":
		return invalidArg(op, "namespace must not be empty")
	case !utf8.ValidString(namespace):
		return invalidArg(op, "namespace must be valid UTF-8")
	case strings.IndexByte(namespace, 0) >= 0:
		return invalidArg(op, "namespace must not contain a NUL byte")
	}
	return nil
}

func nameID(namespace, name string) int64 {
	h := sha256.New()
	h.Write([]byte(namespace))
	h.Write([]byte{0})
	h.Write([]byte(name))
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return int64(binary.BigEndian.Uint64(sum[:8]))
}

// LegacyFNV1a32 is the 32-bit FNV-1a string hash of the hand-written
// advisory-lock pattern that package advisory replaces (a hashString helper
// in TypeScript services; see "Migrating from the hand-written pattern" in
// docs/advisory.md), reproduced exactly: offset basis 2166136261, prime
// 16777619, over the UTF-16 code units of input (JavaScript's charCodeAt, so
// a character outside the Basic Multilingual Plane counts as its two
// surrogates), returned as a signed 32-bit integer (hash | 0). For ASCII
// input it equals standard FNV-1a over the bytes. Invalid UTF-8 in input
// is read as U+FFFD, as a JavaScript string would hold it.
//
// Legacy: 32 bits give a 50% chance of some collision from about 77,000
// distinct inputs, and inputs joined with ":" can collide by construction
// ("a:b"+"c" and "a"+"b:c"). Use it only to interoperate with services that
// still compute these ids; new locks use FromName or a Registry.
func LegacyFNV1a32(input string) int32 {
	h := uint32(2166136261)
	for u := range rules.UTF16Units(input) {
		h ^= uint32(u)
		h *= 16777619
	}
	return int32(h)
}

// FromLegacyFNV1a32 is ID(int64(LegacyFNV1a32(input))): the key that
// pg_advisory_xact_lock(hashString(input)) locks, the bigint form with the
// 32-bit value sign-extended. See LegacyFNV1a32 for why it is legacy.
func FromLegacyFNV1a32(input string) Key { return ID(int64(LegacyFNV1a32(input))) }

// IsZero reports whether k is the zero (invalid) Key.
func (k Key) IsZero() bool { return k.form == formNone }

// Int64 returns the 64-bit key; ok is false for the pair form and the zero
// Key.
func (k Key) Int64() (id int64, ok bool) { return k.id, k.form == formInt64 }

// Pair returns the two 32-bit keys; ok is false for the 64-bit form and the
// zero Key.
func (k Key) Pair() (k1, k2 int32, ok bool) {
	return int32(k.id >> 32), int32(uint32(k.id)), k.form == formPair
}

// Name returns the registry name of a Key made by a Registry, or "".
func (k Key) Name() string {
	if k.decl == nil {
		return ""
	}
	return k.decl.d.Name
}

// Declared returns the declaration a Key was made from, or nil.
func (k Key) Declared() *Declared { return k.decl }

// Same reports whether k and o are the same PostgreSQL lock, whatever
// declaration either carries.
func (k Key) Same(o Key) bool { return k.form == o.form && k.id == o.id }

// bare is k without its declaration, for map keys.
func (k Key) bare() Key { return Key{form: k.form, id: k.id} }

// String formats the id ("42424242", "(1,2)"), prefixed by the registry
// name when there is one ("booking.create:-7291..."). Lock ids are not
// secrets, and a Key holds no arguments, so Strings are safe to log.
func (k Key) String() string {
	var s string
	switch k.form {
	case formInt64:
		s = strconv.FormatInt(k.id, 10)
	case formPair:
		k1, k2, _ := k.Pair()
		s = fmt.Sprintf("(%d,%d)", k1, k2)
	default:
		return "<zero advisory.Key>"
	}
	if k.decl != nil {
		return k.decl.d.Name + ":" + s
	}
	return s
}

// lockTag is how pg_locks shows k: classid, objid, objsubid.
func (k Key) lockTag() (classid, objid int64, objsubid int32) {
	sub := int32(1)
	if k.form == formPair {
		sub = 2
	}
	return int64(uint32(uint64(k.id) >> 32)), int64(uint32(k.id)), sub
}

// keyFromTag is the inverse of lockTag; ok is false for a tag that is not
// an advisory lock taken through the SQL functions.
func keyFromTag(classid, objid int64, objsubid int32) (Key, bool) {
	id := int64(uint64(uint32(classid))<<32 | uint64(uint32(objid)))
	switch objsubid {
	case 1:
		return Key{form: formInt64, id: id}, true
	case 2:
		return Key{form: formPair, id: id}, true
	}
	return Key{}, false
}

// args are the SQL arguments for k, matching the stmts of its form.
func (k Key) args() []any {
	if k.form == formPair {
		k1, k2, _ := k.Pair()
		return []any{int64(k1), int64(k2)}
	}
	return []any{k.id}
}

func invalidArg(op, msg string) *syncguard.Error {
	return &syncguard.Error{Op: op, Code: syncguard.ErrInvalidArgument, Msg: msg}
}
