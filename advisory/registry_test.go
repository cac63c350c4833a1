package advisory

import (
	"fmt"
	"strings"
	"testing"

	"github.com/syncguard/syncguard-go/syncguard"
)

func wantInvalid(t *testing.T, err error, contains string) {
	t.Helper()
	if syncguard.CodeOf(err) != syncguard.ErrInvalidArgument {
		t.Fatalf("want InvalidArgument, got %v", err)
	}
	if contains != "" && !strings.Contains(err.Error(), contains) {
		t.Fatalf("error %q does not mention %q", err, contains)
	}
}

func TestRegistryDeclareRejects(t *testing.T) {
	r := MustNewRegistry("mais")
	r.MustDeclare(Decl{Name: "cleanup", Kind: Session, Purpose: "p", ID: ID(42424242)})
	r.MustDeclare(Decl{Name: "booking.create", Kind: Transaction, Purpose: "p", Params: []string{"tenantId", "date"}})
	global := r.MustDeclare(Decl{Name: "reports.nightly", Kind: Session, Purpose: "p"})

	gid, _ := global.Key()
	cases := []struct {
		d    Decl
		want string
	}{
		{Decl{Name: "cleanup", Kind: Session, Purpose: "p"}, "already declared"},
		{Decl{Name: "other", Kind: Session, Purpose: "p", ID: ID(42424242)}, `already used by lock "cleanup"`},
		{Decl{Name: "other", Kind: Session, Purpose: "p", ID: gid.bare()}, `already used by lock "reports.nightly"`},
		{Decl{Name: "other", Kind: Session, Purpose: "p", ID: gid}, "raw id"},
		{Decl{Name: "", Kind: Session, Purpose: "p"}, "Name must not be empty"},
		{Decl{Name: "a\nb", Kind: Session, Purpose: "p"}, "printable"},
		{Decl{Name: strings.Repeat("x", 201), Kind: Session, Purpose: "p"}, "at most 200"},
		{Decl{Name: "k", Purpose: "p"}, "Kind"},
		{Decl{Name: "k", Kind: 9, Purpose: "p"}, "Kind"},
		{Decl{Name: "k", Kind: Session}, "Purpose"},
		{Decl{Name: "k", Kind: Session, Purpose: "p", Params: []string{"a-b"}}, "identifier"},
		{Decl{Name: "k", Kind: Session, Purpose: "p", Params: []string{"a", "a"}}, "twice"},
		{Decl{Name: "k", Kind: Session, Purpose: "p", Params: []string{"a"}, ID: ID(1)}, "fixed ID"},
		{Decl{Name: "k", Kind: Session, Purpose: "p", Params: []string{"a"}, LegacyFNV: "{b}"}, "{b} is not a parameter"},
		{Decl{Name: "k", Kind: Session, Purpose: "p", Params: []string{"a", "b"}, LegacyFNV: "{a}:"}, "b does not appear"},
		{Decl{Name: "k", Kind: Session, Purpose: "p", Params: []string{"a"}, LegacyFNV: "{a"}, "unmatched '{'"},
		{Decl{Name: "k", Kind: Session, Purpose: "p", Params: []string{"a"}, LegacyFNV: "a}{a}"}, "unmatched '}'"},
	}
	for _, c := range cases {
		_, err := r.Declare(c.d)
		wantInvalid(t, err, c.want)
	}
	if n := len(r.Decls()); n != 3 {
		t.Fatalf("failed declarations must add nothing; have %d", n)
	}
	defer func() {
		if recover() == nil {
			t.Error("MustDeclare of a duplicate must panic")
		}
	}()
	r.MustDeclare(Decl{Name: "cleanup", Kind: Session, Purpose: "p"})
}

func TestRegistryKeys(t *testing.T) {
	r := MustNewRegistry("mais")
	booking := r.MustDeclare(Decl{Name: "booking.create", Kind: Transaction, Purpose: "p", Params: []string{"tenantId", "date"}})
	legacy := r.MustDeclare(Decl{Name: "booking.legacy", Kind: Transaction, Purpose: "p",
		Params: []string{"tenantId", "date"}, LegacyFNV: "{tenantId}:{date}"})
	cleanup := r.MustDeclare(Decl{Name: "cleanup", Kind: Session, Purpose: "p", ID: ID(42424242)})
	nightly := r.MustDeclare(Decl{Name: "nightly", Kind: Session, Purpose: "p"})

	k, err := booking.Key("tenant-1", "2025-01-15")
	if err != nil {
		t.Fatal(err)
	}
	want, _ := FromName("mais", "booking.create\x00tenant-1\x002025-01-15")
	if !k.Same(want) || k.Name() != "booking.create" || k.Declared() != booking {
		t.Fatalf("booking key = %v, want %v with its declaration", k, want)
	}
	if k2, _ := r.Key("booking.create", "tenant-1", "2025-01-15"); k2 != k {
		t.Fatal("Registry.Key and Declared.Key must agree")
	}
	// Arguments cannot shift into one another.
	k3, _ := booking.Key("tenant-1\x002025", "01-15")
	if k3.Same(k) {
		t.Fatal("NUL must not be accepted in arguments")
	}

	lk, _ := legacy.Key("tenant-1", "2025-01-15")
	if id, _ := lk.Int64(); id != 761239885 {
		t.Fatalf("legacy key = %v, want the document's hashTenantDate 761239885", lk)
	}
	if ck, _ := cleanup.Key(); !ck.Same(ID(42424242)) || ck.Name() != "cleanup" {
		t.Fatalf("cleanup key = %v", ck)
	}
	nk, _ := nightly.Key()
	if want, _ := FromName("mais", "nightly"); !nk.Same(want) {
		t.Fatalf("global key = %v want %v", nk, want)
	}

	for _, args := range [][]string{nil, {"t"}, {"t", "d", "x"}, {"", "d"}, {"t", "\xff"}, {"t", "a\x00b"}} {
		_, err := booking.Key(args...)
		wantInvalid(t, err, "booking.create")
	}
	_, err = cleanup.Key("x")
	wantInvalid(t, err, "takes 0 argument")
	_, err = r.Key("undeclared")
	wantInvalid(t, err, `lock "undeclared" is not declared`)

	// Monitoring names.
	for _, c := range []struct {
		k    Key
		name string
	}{{ID(42424242), "cleanup"}, {nk.bare(), "nightly"}, {k.bare(), "booking.create"}, {lk.bare(), "booking.legacy"}} {
		if got, ok := r.NameOf(c.k); !ok || got != c.name {
			t.Errorf("NameOf(%v) = %q, %v; want %q", c.k, got, ok, c.name)
		}
	}
	if _, ok := r.NameOf(ID(7)); ok {
		t.Error("unknown ids have no name")
	}
}

func TestRegistryRecentIsBounded(t *testing.T) {
	r := MustNewRegistry("ns")
	d := r.MustDeclare(Decl{Name: "p", Kind: Transaction, Purpose: "p", Params: []string{"i"}})
	first := d.MustKey("0")
	for i := 1; i <= recentMax+10; i++ {
		d.MustKey(fmt.Sprint(i))
	}
	if len(r.recent) != recentMax || len(r.ring) != recentMax {
		t.Fatalf("recent holds %d (ring %d), want %d", len(r.recent), len(r.ring), recentMax)
	}
	if _, ok := r.NameOf(first.bare()); ok {
		t.Error("the oldest instance key should have been forgotten")
	}
	if _, ok := r.NameOf(d.MustKey(fmt.Sprint(recentMax + 10)).bare()); !ok {
		t.Error("the newest instance key should be remembered")
	}
}

func TestMarkdownGolden(t *testing.T) {
	r := MustNewRegistry("mais")
	r.MustDeclare(Decl{Name: "idempotency.cleanup", Kind: Session, Component: "IdempotencyService",
		Purpose: "Cleanup scheduler coordination", ID: ID(42424242), Source: "server/src/services/idempotency.service.ts"})
	r.MustDeclare(Decl{Name: "booking.create", Kind: Transaction, Component: "BookingRepository",
		Purpose: "Booking creation race prevention", Scope: "Per tenant+date", Params: []string{"tenantId", "date"},
		LegacyFNV: "{tenantId}:{date}", Source: "booking.go"})
	r.MustDeclare(Decl{Name: "booking.balance", Kind: Transaction, Component: "BookingRepository",
		Purpose: "Balance | payment\ncoordination", Scope: "Per tenant+booking", Params: []string{"tenantId", "bookingId"}})
	r.MustDeclare(Decl{Name: "legacy.pair", Kind: Session, Purpose: "p", ID: Pair(1, -2), Source: "x.go"})
	got := r.Markdown()
	want := "<!-- Generated by advisory.Registry.Markdown from the lock declarations in code. Do not edit. -->\n" +
		"\n" +
		"## Advisory locks (namespace `mais`)\n" +
		"\n" +
		"### Global locks\n" +
		"\n" +
		"| Lock ID | Name | Component | Purpose | Scope | Lock Type | Id Scheme | Source |\n" +
		"|---------|------|-----------|---------|-------|-----------|-----------|--------|\n" +
		"| `42424242` | `idempotency.cleanup` | IdempotencyService | Cleanup scheduler coordination | Global | Session | fixed | `server/src/services/idempotency.service.ts` |\n" +
		"| `(1, -2)` | `legacy.pair` |  | p | Global | Session | fixed | `x.go` |\n" +
		"\n" +
		"### Per-resource locks\n" +
		"\n" +
		"| Name | Hash Input | Component | Purpose | Scope | Lock Type | Id Scheme | Source |\n" +
		"|------|------------|-----------|---------|-------|-----------|-----------|--------|\n" +
		"| `booking.balance` | `booking.balance {tenantId} {bookingId}` | BookingRepository | Balance \\| payment coordination | Per tenant+booking | Transaction | SHA-256 | `github.com/syncguard/syncguard-go/advisory/registry_test.go` |\n" +
		"| `booking.create` | `{tenantId}:{date}` | BookingRepository | Booking creation race prevention | Per tenant+date | Transaction | FNV-1a 32-bit (legacy) | `booking.go` |\n" +
		"\n" +
		"Id schemes: SHA-256 ids are the first 8 bytes of SHA-256(namespace NUL hash input), a signed big-endian bigint, where NUL separates the arguments too (see advisory.FromName). FNV-1a ids are the legacy 32-bit hash of the hash input, sign-extended to bigint. Transaction locks use pg_advisory_xact_lock, session locks pg_advisory_lock.\n"
	if got != want {
		t.Errorf("Markdown mismatch.\n--- got\n%s\n--- want\n%s", got, want)
	}
	if r2 := MustNewRegistry("empty"); !strings.Contains(r2.Markdown(), "### Global locks\n\nNone.\n") {
		t.Errorf("empty registry:\n%s", r2.Markdown())
	}
}
