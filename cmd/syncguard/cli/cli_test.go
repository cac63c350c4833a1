package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/syncguard/syncguard-go/advisory"
)

func TestRel(t *testing.T) {
	now := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		d    time.Duration
		want string
	}{
		{0, "now"},
		{12 * time.Second, "in 12s"},
		{-3 * time.Second, "3.0s ago"},
		{-3500 * time.Millisecond, "3.5s ago"},
		{450 * time.Millisecond, "in 450ms"},
		{125 * time.Second, "in 2m05s"},
		{-(2*time.Hour + 10*time.Minute), "2h10m ago"},
		{76 * time.Hour, "in 3d4h"},
	} {
		if got := rel(now.Add(c.d), now); got != c.want {
			t.Errorf("rel(%v) = %q, want %q", c.d, got, c.want)
		}
	}
}

// The registry file may be the document advisory.Registry.Markdown
// generates, or a hand-kept one with Component and Purpose columns.
func TestLoadRegistry(t *testing.T) {
	reg := advisory.MustNewRegistry("app")
	reg.MustDeclare(advisory.Decl{Name: "idempotency.cleanup", Kind: advisory.Session, Purpose: "Cleanup", ID: advisory.ID(42424242)})
	reg.MustDeclare(advisory.Decl{Name: "pair.lock", Kind: advisory.Transaction, Purpose: "Pair | piped", ID: advisory.Pair(1, -2)})
	reg.MustDeclare(advisory.Decl{Name: "booking.create", Kind: advisory.Transaction, Purpose: "Booking", Params: []string{"tenantId"}})
	derived := reg.MustDeclare(advisory.Decl{Name: "derived.global", Kind: advisory.Session, Purpose: "Derived id"})
	dir := t.TempDir()
	gen := filepath.Join(dir, "generated.md")
	if err := os.WriteFile(gen, []byte(reg.Markdown()), 0o644); err != nil {
		t.Fatal(err)
	}
	hand := filepath.Join(dir, "hand.md")
	if err := os.WriteFile(hand, []byte("# Registry\n\n| Lock ID | Component | Purpose | Lock Type |\n|---|---|---|---|\n"+
		"| `42424242` | IdempotencyService | Cleanup scheduler coordination | Session (`pg_try_advisory_lock`) |\n"+
		"| `not-an-id` | X | Y | Session |\n\ntext\n\n| Hash Input Pattern | Component |\n|---|---|\n| `{tenantId}:{date}` | BookingRepository |\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	a := &app{stdout: &bytes.Buffer{}, stderr: &stderr, cmd: "advisory ls"}

	got, err := a.loadRegistry(gen)
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range map[advisory.Key]string{
		advisory.ID(42424242): "idempotency.cleanup",
		advisory.Pair(1, -2):  "pair.lock",
		derived.MustKey():     "derived.global",
		advisory.ID(-1234):    "",
		advisory.ID(7):        "",
	} {
		if n, _ := got.NameOf(k); n != want {
			t.Errorf("generated registry: NameOf(%v) = %q, want %q", k, n, want)
		}
	}

	got, err = a.loadRegistry(hand)
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := got.NameOf(advisory.ID(42424242)); n != "IdempotencyService: Cleanup scheduler coordination" {
		t.Errorf("hand-kept registry: name %q", n)
	}
	if !bytes.Contains(stderr.Bytes(), []byte(`"not-an-id"`)) {
		t.Errorf("a bad id should be reported: %q", stderr.String())
	}
}
