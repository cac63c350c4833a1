package cli

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
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

// A binary installed with `go install .../cmd/syncguard@v1.2.3` records
// that version as its main module's; an embedding program records it as a
// dependency.
func TestReadBuildInfo(t *testing.T) {
	installed := &debug.BuildInfo{GoVersion: "go1.25.4", Main: debug.Module{Path: modulePath, Version: "v1.2.3"},
		Deps: []*debug.Module{{Path: corePath, Version: "v1.2.3"}, {Path: "github.com/jackc/pgx/v5", Version: "v5.12.0"}}}
	b := readBuildInfo(installed, true)
	want := "syncguard v1.2.3 (library v1.2.3, go1.25.4 " + runtime.GOOS + "/" + runtime.GOARCH + ")"
	if got := b.text(); got != want {
		t.Errorf("go-installed:\n got %q\nwant %q", got, want)
	}
	checkout := &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: modulePath, Version: "v0.1.1-0.20260105120000-abcdef012345+dirty"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abcdef0123456789"}, {Key: "vcs.modified", Value: "true"}}}
	if got := readBuildInfo(checkout, true).text(); !strings.Contains(got, "v0.1.1-0.20260105120000-abcdef012345+dirty") || !strings.Contains(got, "commit abcdef012345+dirty") {
		t.Errorf("checkout build: %q", got)
	}
	embedded := &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: "example.com/ops", Version: "(devel)"},
		Deps: []*debug.Module{{Path: modulePath, Version: "v1.0.0"}, {Path: corePath, Version: "v1.0.1"}}}
	if got := readBuildInfo(embedded, true).text(); !strings.HasPrefix(got, "syncguard v1.0.0 (library v1.0.1, go1.26.0") {
		t.Errorf("embedded: %q", got)
	}
	if got := readBuildInfo(nil, false).text(); !strings.Contains(got, runtime.Version()) {
		t.Errorf("no build info: %q", got)
	}
}

// Every flag of every command but --key and the short forms is read from
// its SYNCGUARD_* variable, and `help` says so.
func TestEveryFlagHasAnEnvironmentVariable(t *testing.T) {
	for _, c := range commands {
		var out bytes.Buffer
		looked := map[string]bool{}
		a := &app{stdout: &out, stderr: &bytes.Buffer{}, getenv: func(k string) string { looked[k] = true; return "" },
			environ: func() []string { return nil }}
		args := []string{c.name, "-h"}
		if c.name == "advisory" {
			args = []string{"advisory", "ls", "-h"}
		}
		if code := a.main(args); code != 0 {
			t.Fatalf("%s -h: exit %d", c.name, code)
		}
		var fs *flag.FlagSet
		a.cmd = c.name
		fs = a.flagSet(c.name) // the global flags
		names := []string{}
		fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
		for _, line := range strings.Split(out.String(), "\n") {
			if strings.HasPrefix(line, "  --") {
				names = append(names, strings.Fields(strings.TrimPrefix(line, "  --"))[0])
			}
		}
		for _, n := range names {
			if notFromEnv[n] {
				continue
			}
			if !looked[envName(n)] {
				t.Errorf("%s: --%s is not read from $%s", c.name, n, envName(n))
			}
			if !strings.Contains(out.String(), "[$"+envName(n)+"]") && !globalFlags[n] {
				t.Errorf("%s -h does not name $%s", c.name, envName(n))
			}
		}
	}
}

func TestParseDuration(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"10": 10 * time.Second, "2.5": 2500 * time.Millisecond, "0": 0, "500ms": 500 * time.Millisecond, "1m30s": 90 * time.Second,
	} {
		if got, err := parseDuration(in); err != nil || got != want {
			t.Errorf("parseDuration(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "x", "1e3", "-", "10 s", "99999999999999999999"} {
		if _, err := parseDuration(in); err == nil {
			t.Errorf("parseDuration(%q): no error", in)
		}
	}
	var d time.Duration
	f := &durationFlag{d: &d, min: time.Second, max: time.Hour}
	for _, in := range []string{"0", "-1s", "2h", "forever"} {
		if err := f.Set(in); err == nil {
			t.Errorf("Set(%q) in [1s, 1h]: no error", in)
		}
	}
}

// A bad value names what is accepted: the range of a duration flag, the
// words of a boolean variable.
func TestBadValueSaysWhatIsAccepted(t *testing.T) {
	for _, c := range []struct {
		env  map[string]string
		args []string
		want string
	}{
		{args: []string{"run", "--key", "k", "--wait", "-1", "--", "true"}, want: "range 0s to 8760h, or forever"},
		{args: []string{"run", "--key", "k", "--ttl", "x", "--", "true"}, want: "range 1s to 24h"},
		{env: map[string]string{"SYNCGUARD_QUIET": "yes"}, args: []string{"run", "--key", "k", "--", "true"}, want: "$SYNCGUARD_QUIET=yes: want 1 or 0, true or false"},
	} {
		var stderr bytes.Buffer
		a := &app{stdout: &bytes.Buffer{}, stderr: &stderr, getenv: func(k string) string { return c.env[k] },
			environ: func() []string { return nil }}
		if code := a.main(c.args); code != ExitUsage || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("%v %v: exit %d, %q; want exit %d and %q", c.env, c.args, code, stderr.String(), ExitUsage, c.want)
		}
	}
}

// Bundled one-letter flags are split as getopt splits them, only in the
// leading flags: COMMAND's own arguments, values of flags and long flags
// are left as they are.
func TestExpandShort(t *testing.T) {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	var b bool
	var s string
	fs.BoolVar(&b, "n", false, "")
	fs.BoolVar(&b, "q", false, "")
	fs.BoolVar(&b, "v", false, "")
	fs.BoolVar(&b, "json", false, "")
	fs.StringVar(&s, "w", "", "")
	fs.StringVar(&s, "c", "", "")
	fs.StringVar(&s, "dsn", "", "")
	for _, c := range []struct{ in, want string }{
		{"-nq k -- ls -la", "-n -q k -- ls -la"},
		{"-nqv k", "-n -q -v k"},
		{"-nw5 k", "-n -w 5 k"},
		{"-nw 5 k", "-n -w 5 k"},
		{"-w5", "-w 5"},
		{"-w=5", "-w=5"},
		{"-qc echo|hi k", "-q -c echo|hi k"},
		{"-json -n", "-json -n"},
		{"--dsn -nq -q", "--dsn -nq -q"}, // -nq is --dsn's value
		{"-n -- -nq", "-n -- -nq"},
		{"k -nq", "k -nq"},   // after a positional argument: not ours
		{"-nx k", "-nx k"},   // x is no flag: flag reports -nx
		{"--nq k", "--nq k"}, // two dashes: a long name
	} {
		got := strings.Join(expandShort(fs, strings.Fields(c.in)), " ")
		if got != c.want {
			t.Errorf("expandShort(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
