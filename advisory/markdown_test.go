package advisory

import (
	"strings"
	"testing"
)

// The document Markdown writes reads back: every global lock, with its
// name, kind, purpose and id, into a registry of another namespace.
func TestDeclareMarkdownReadsMarkdown(t *testing.T) {
	r := MustNewRegistry("mais")
	r.MustDeclare(Decl{Name: "cleanup", Kind: Session, Component: "Jobs", Purpose: "nightly | cleanup", ID: ID(42424242)})
	r.MustDeclare(Decl{Name: "pair", Kind: Transaction, Purpose: "a pair", ID: Pair(1, -2)})
	r.MustDeclare(Decl{Name: "reports.nightly", Kind: Session, Purpose: "derived id"})
	r.MustDeclare(Decl{Name: "booking.create", Kind: Transaction, Purpose: "per resource", Params: []string{"tenantId"}})

	got := MustNewRegistry("cli")
	if err := got.DeclareMarkdown(strings.NewReader(r.Markdown()), "locks.md", func(line int, err error) {
		t.Errorf("line %d skipped: %v", line, err)
	}); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range got.Decls() {
		names = append(names, d.Name)
		want := r.Lookup(d.Name)
		if want == nil {
			t.Fatalf("declared %q, not in the original", d.Name)
		}
		w := want.Decl()
		if d.Kind != w.Kind || d.Purpose != w.Purpose || d.ID != w.ID.bare() && d.ID != ID(nameID("mais", d.Name)) || d.Source != "locks.md" {
			t.Errorf("%q: got %+v, want %+v", d.Name, d, w)
		}
	}
	if strings.Join(names, ",") != "cleanup,pair,reports.nightly" {
		t.Errorf("declared %v, want the three global locks", names)
	}
}

// A hand-kept registry: names from Component and Purpose, a repeated name
// numbered, malformed ids and a reused id skipped with their lines.
func TestDeclareMarkdownHandKept(t *testing.T) {
	doc := "# Locks\n\n| Lock ID | Component | Purpose | Lock Type |\n|---|---|---|---|\n" +
		"| `42` | billing | nightly run | Transaction |\n| `(1, 2)` | billing | nightly run | session |\n" +
		"| `abc` | bad | id | session |\n| `77` | | | |\n| `42` | dup | same id | session |\n\nprose\n\n| Lock ID |\n|--|\n| 5 |\n"
	r := MustNewRegistry("cli")
	var skipped []int
	if err := r.DeclareMarkdown(strings.NewReader(doc), "reg.md", func(line int, err error) {
		wantInvalid(t, err, "")
		skipped = append(skipped, line)
	}); err != nil {
		t.Fatal(err)
	}
	if len(skipped) != 2 || skipped[0] != 7 || skipped[1] != 9 {
		t.Errorf("skipped lines %v, want [7 9]", skipped)
	}
	for name, want := range map[string]Key{"billing: nightly run": ID(42), "billing: nightly run (2)": Pair(1, 2), "lock 77": ID(77), "lock 5": ID(5)} {
		d := r.Lookup(name)
		if d == nil || d.Decl().ID != want {
			t.Errorf("%q: got %v, want id %v", name, d, want)
		}
	}
	if d := r.Lookup("billing: nightly run"); d == nil || d.Kind() != Transaction {
		t.Errorf("the Transaction lock type is lost")
	}
	if d := r.Lookup("lock 77"); d == nil || d.Kind() != Session || d.Decl().Purpose != "named in reg.md" {
		t.Errorf("lock 77: %+v", d.Decl())
	}
}
