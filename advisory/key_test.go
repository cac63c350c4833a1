package advisory

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"math"
	"testing"

	"github.com/syncguard/syncguard-go/syncguard"
)

// Vectors computed with the document's TypeScript hashString (and
// hashTenantDate, which is the same function over tenantId + ":" + date)
// under Node.js. The non-ASCII rows pin the UTF-16 code unit semantics of
// charCodeAt, including a surrogate pair and an unnormalized "é".
var fnvVectors = []struct {
	in   string
	want int32
}{
	{"", -2128831035}, // 2166136261 | 0: the offset basis
	{"a", -468965076}, // standard FNV-1a 32 vector 0xe40c292c
	{"foobar", -1080231576},
	{"42424242", 1203236997},
	{"tenant-1:2025-01-15", 761239885}, // hashTenantDate("tenant-1", "2025-01-15")
	{"tenant-1:balance:booking-42", 809058413},
	{"tenant_abc123:2025-12-03", -1890297515},
	{"café:2025-01-15", -1522838288},
	{"cafe\u0301:2025-01-15", 1634717485},
	{"日本:2025-01-15", 162390360},
	{"😀:2025-01-15", -1169804876},
	{"t:b:c", -787364656},
}

func TestLegacyFNV1a32MatchesDocument(t *testing.T) {
	for _, v := range fnvVectors {
		if got := LegacyFNV1a32(v.in); got != v.want {
			t.Errorf("LegacyFNV1a32(%q) = %d, want %d (the document's hashString)", v.in, got, v.want)
		}
		k := FromLegacyFNV1a32(v.in)
		if id, ok := k.Int64(); !ok || id != int64(v.want) {
			t.Errorf("FromLegacyFNV1a32(%q) = %v, want the bigint key %d (sign-extended)", v.in, k, v.want)
		}
	}
}

func TestLegacyFNVAmbiguityIsReal(t *testing.T) {
	// Why it is legacy: joined inputs collide by construction.
	if LegacyFNV1a32("a:b"+":"+"c") != LegacyFNV1a32("a"+":"+"b:c") {
		t.Fatal("expected the joined legacy inputs to be identical")
	}
}

func TestFromName(t *testing.T) {
	k, err := FromName("mais", "booking.create")
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte("mais\x00booking.create"))
	want := int64(binary.BigEndian.Uint64(sum[:8]))
	if id, ok := k.Int64(); !ok || id != want {
		t.Fatalf("FromName = %v, want %d", k, want)
	}
	// Pinned value (also computed with Python hashlib and with the SQL in
	// FromName's doc): changing the derivation would move every lock.
	if id, _ := k.Int64(); id != pinnedBookingCreate {
		t.Fatalf("FromName(mais, booking.create) = %d, pinned %d", id, pinnedBookingCreate)
	}
	other, _ := FromName("mais2", "booking.create")
	shifted, _ := FromName("mais", "\x00booking.create")
	if other.Same(k) || shifted.Same(k) {
		t.Fatal("namespace must separate ids")
	}
	for _, c := range []struct{ ns, name string }{
		{"", "x"}, {"a\x00b", "x"}, {"ns", ""}, {"\xff", "x"}, {"ns", "\xff"},
	} {
		_, err := FromName(c.ns, c.name)
		if syncguard.CodeOf(err) != syncguard.ErrInvalidArgument || !errors.Is(err, syncguard.ErrInvalidArgument) {
			t.Errorf("FromName(%q, %q) error = %v, want InvalidArgument", c.ns, c.name, err)
		}
	}
}

// pinnedBookingCreate is FromName("mais", "booking.create"); conformance
// checks the same value with the SQL expression in FromName's doc.
const pinnedBookingCreate = 7520250815572602285

func TestKeyForms(t *testing.T) {
	cases := []struct {
		k               Key
		class, obj      int64
		sub             int32
		str             string
		isInt64, isPair bool
	}{
		{ID(42424242), 0, 42424242, 1, "42424242", true, false},
		{ID(-1), math.MaxUint32, math.MaxUint32, 1, "-1", true, false},
		{ID(math.MinInt64), 1 << 31, 0, 1, "-9223372036854775808", true, false},
		{Pair(1, 2), 1, 2, 2, "(1,2)", false, true},
		{Pair(-1, math.MinInt32), math.MaxUint32, 1 << 31, 2, "(-1,-2147483648)", false, true},
	}
	for _, c := range cases {
		cl, ob, sub := c.k.lockTag()
		if cl != c.class || ob != c.obj || sub != c.sub {
			t.Errorf("%v: lockTag = %d,%d,%d want %d,%d,%d", c.k, cl, ob, sub, c.class, c.obj, c.sub)
		}
		back, ok := keyFromTag(cl, ob, sub)
		if !ok || back != c.k {
			t.Errorf("%v: keyFromTag round trip gave %v", c.k, back)
		}
		if c.k.String() != c.str {
			t.Errorf("String = %q want %q", c.k.String(), c.str)
		}
		if _, ok := c.k.Int64(); ok != c.isInt64 {
			t.Errorf("%v: Int64 ok = %v", c.k, ok)
		}
		if _, _, ok := c.k.Pair(); ok != c.isPair {
			t.Errorf("%v: Pair ok = %v", c.k, ok)
		}
	}
	if ID(1<<32 | 2).Same(Pair(1, 2)) {
		t.Error("ID and Pair are different key spaces")
	}
	k1, k2, _ := Pair(-5, 7).Pair()
	if k1 != -5 || k2 != 7 {
		t.Errorf("Pair round trip: %d %d", k1, k2)
	}
	if !(Key{}).IsZero() || ID(0).IsZero() {
		t.Error("only the zero Key is zero; ID(0) is a valid lock")
	}
	if _, ok := keyFromTag(1, 2, 3); ok {
		t.Error("objsubid 3 is not an advisory function lock")
	}
}
