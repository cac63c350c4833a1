//go:build unix

package clitest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

var (
	kindsOnce sync.Once
	kindsDSN  string
)

// kindsDB is a database of the kinds' tests, made by 'syncguard setup
// --all' (every kind's tables), so that the other tests' database keeps
// only the mutex's.
func kindsDB(t *testing.T) string {
	t.Helper()
	kindsOnce.Do(func() {
		_, d := freshDB(t, "kinds")
		if r := sg(t, d, "setup", "--all"); r.code == 0 {
			kindsDSN = d
		} else {
			t.Log(r)
		}
	})
	if kindsDSN == "" {
		t.Fatal("setup --all failed")
	}
	return kindsDSN
}

// holdCmd is a COMMAND that writes what echo prints to out, then holds
// until the file release exists.
func holdCmd(out, release, echo string) string {
	return `echo "` + echo + `" > ` + out + `.tmp && mv ` + out + `.tmp ` + out + `; while [ ! -e ` + release + ` ]; do sleep 0.02; done`
}

func fields(t *testing.T, path string) []string {
	t.Helper()
	return strings.Fields(waitFile(t, path, time.Minute))
}

func TestRunPermits(t *testing.T) {
	t.Parallel()
	d, dir := kindsDB(t), t.TempDir()
	k, release := key(t, "sem"), filepath.Join(dir, "release")
	var holders []*proc
	for _, name := range []string{"a", "b"} {
		holders = append(holders, start(t, env(d), "run", "--permits", "2", k, "--identity", "worker-"+name, "-c",
			holdCmd(filepath.Join(dir, name), release, `$SYNCGUARD_SLOT $SYNCGUARD_FENCE $SYNCGUARD_FENCE_KEY $SYNCGUARD_FENCE_NUM`)))
	}
	a, b := fields(t, filepath.Join(dir, "a")), fields(t, filepath.Join(dir, "b"))
	if len(a) != 4 || len(b) != 4 || a[0] == b[0] || !slices.Contains([]string{"1", "2"}, a[0]) || !slices.Contains([]string{"1", "2"}, b[0]) {
		t.Fatalf("want slots 1 and 2: %q %q", a, b)
	}
	for _, f := range [][]string{a, b} {
		if f[2] != k+"#"+f[0] || len(f[1]) != 15 || strings.TrimLeft(f[1], "0") != f[3] {
			t.Errorf("permit environment %q: want SLOT FENCE KEY#SLOT FENCE_NUM", f)
		}
	}
	// A third: busy with -n, and waits without.
	r := sg(t, d, "run", "--permits", "2", "-n", k, "--", "true")
	wantCode(t, r, 75)
	if !strings.Contains(r.stderr, "lock busy") {
		t.Errorf("third permit: %s", r)
	}
	third := start(t, env(d), "run", "--permits", "2", "-w", "60", k, "--", "sh", "-c", `echo "$SYNCGUARD_SLOT"`)
	// Another number of permits for the same key is refused.
	wantCode(t, sg(t, d, "run", "--permits", "3", "-n", k, "--", "true"), 64)

	st := sg(t, d, "status", k)
	wantCode(t, st, 0)
	for _, want := range []string{"state", "free", "permit 1/2", "permit 2/2", "worker-a", "worker-b"} {
		if !strings.Contains(st.stdout, want) {
			t.Errorf("status should show %q: %s", want, st)
		}
	}
	m := decode(t, sg(t, d, "ls", "--json", "--keys"))
	n := 0
	for _, h := range m["holdings"].([]any) {
		h := h.(map[string]any)
		if h["kind"] == "permit" && slices.Contains(h["keys"].([]any), any(k)) {
			n++
			shape(t, "ls permit", h, map[string]string{"kind": "string", "keys": "array", "keyHashes": "array", "fences": "array", "fence": "string",
				"slot": "number", "permits": "number", "acquiredAt": "string", "expiresAt": "string", "expiresInMs": "number", "lockIdHash": "string", "identity": "string"})
		}
	}
	if n != 2 {
		t.Errorf("ls --json: want 2 permits of %s: %v", k, m)
	}
	r = releaseThen(t, third, "a third permit", release, holders)
	wantCode(t, r, 0)
	if s := strings.TrimSpace(r.stdout); s != "1" && s != "2" {
		t.Errorf("third permit's slot: %s", r)
	}
}

func TestRunSharedExclusive(t *testing.T) {
	t.Parallel()
	d, dir := kindsDB(t), t.TempDir()
	k, release := key(t, "rw"), filepath.Join(dir, "release")
	r := sg(t, d, "run", "-x", k, "-c", `echo "$SYNCGUARD_MODE $SYNCGUARD_FENCE"`)
	wantCode(t, r, 0)
	w1 := strings.Fields(r.stdout)
	if len(w1) != 2 || w1[0] != "exclusive" || len(w1[1]) != 15 {
		t.Fatalf("writer's environment: %s", r)
	}
	var readers []*proc
	for _, name := range []string{"r1", "r2"} {
		readers = append(readers, start(t, env(d), "run", "--shared", k, "--identity", "reader-"+name, "-c",
			holdCmd(filepath.Join(dir, name), release, `$SYNCGUARD_MODE $SYNCGUARD_FENCE`)))
	}
	// Both readers hold at once, each with the writer's fence as generation.
	for _, name := range []string{"r1", "r2"} {
		if f := fields(t, filepath.Join(dir, name)); !slices.Equal(f, []string{"shared", w1[1]}) {
			t.Errorf("reader %s: %q, want shared and the writer's fence %s", name, f, w1[1])
		}
	}
	wantCode(t, sg(t, d, "run", "-xn", k, "--", "true"), 75)
	writer := start(t, env(d), "run", "-x", "-w", "60", k, "-c", `echo "$SYNCGUARD_FENCE"`)
	st := sg(t, d, "status", "--json", k)
	wantCode(t, st, 0)
	var ids []string
	for _, h := range decode(t, st)["holdings"].([]any) {
		if h := h.(map[string]any); h["kind"] == "shared" {
			ids = append(ids, h["identity"].(string))
		}
	}
	if slices.Sort(ids); !slices.Equal(ids, []string{"reader-r1", "reader-r2"}) {
		t.Errorf("status --json: want both readers: %s", st)
	}
	r = releaseThen(t, writer, "a writer", release, readers)
	wantCode(t, r, 0)
	if w2 := strings.TrimSpace(r.stdout); len(w2) != 15 || w2 <= w1[1] {
		t.Errorf("the second writer's fence %q should be above %s", w2, w1[1])
	}
}

func TestRunSetOfKeys(t *testing.T) {
	t.Parallel()
	d, dir := kindsDB(t), t.TempDir()
	ka, kb := key(t, "a b"), key(t, "b=1")
	// Two runs naming the keys in opposite orders, three times each: all
	// complete, and never at once (mkdir fails for the second).
	body := `mkdir ` + dir + `/in || exit 99; sleep 0.1; rmdir ` + dir + `/in; printf '%s\n%s\n%s\n' "$SYNCGUARD_FENCES" "$SYNCGUARD_FENCE" "$SYNCGUARD_KEY" >> ` + dir + `/out`
	var ps []*proc
	for range 3 {
		ps = append(ps, start(t, env(d), "run", "-w", "60", "--key", ka, "--key", kb, "-c", body),
			start(t, env(d), "run", "-w", "60", kb, "--key", ka, "-c", body))
	}
	for _, p := range ps {
		wantCode(t, p.wait(t, time.Minute), 0)
	}
	lines := strings.Split(strings.TrimSpace(waitFile(t, dir+"/out", time.Second)), "\n")
	if len(lines) != 18 {
		t.Fatalf("want 6 runs of 3 lines: %q", lines)
	}
	seen := map[string]bool{}
	for i := 0; i < len(lines); i += 3 {
		var fences map[string]string
		if err := json.Unmarshal([]byte(lines[i]), &fences); err != nil || len(fences) != 2 || fences[ka] == "" || fences[kb] == "" {
			t.Fatalf("$SYNCGUARD_FENCES = %q: %v", lines[i], err)
		}
		if seen[fences[ka]] || lines[i+1] != max(fences[ka], fences[kb]) || !strings.HasPrefix(lines[i+2], "multilock:[") {
			t.Errorf("run %d: fences %v, $SYNCGUARD_FENCE %s (want the largest, each key's fence once), $SYNCGUARD_KEY %s", i/3, fences, lines[i+1], lines[i+2])
		}
		seen[fences[ka]] = true
	}

	// status and ls show a held set with its identity.
	release := filepath.Join(dir, "release")
	p := start(t, env(d), "run", "--key", ka, "--key", kb, "--identity", "set-holder", "-c", holdCmd(filepath.Join(dir, "held"), release, "x"))
	waitFile(t, filepath.Join(dir, "held"), time.Minute)
	st := sg(t, d, "status", kb)
	wantCode(t, st, 0)
	if !strings.Contains(st.stdout, "set-holder") || !strings.Contains(st.stdout, `"`+ka+`"`) {
		t.Errorf("status should show the set and its holder: %s", st)
	}
	ls := sg(t, d, "ls")
	if !strings.Contains(ls.stdout, "set-holder") || strings.Contains(ls.stdout, kb) {
		t.Errorf("ls should show the set's holder and hash its keys: %s", ls)
	}
	wantCode(t, sg(t, d, "run", "-n", "--key", kb, "--key", "other", "--", "true"), 75)
	os.WriteFile(release, nil, 0o644)
	wantCode(t, p.wait(t, time.Minute), 0)
}

func TestRunKindUsageErrors(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--permits", "2", "-s", "k"}, "--permits and --shared: one kind of lock at a time"},
		{[]string{"-sx", "k"}, "--shared and --exclusive: one kind"},
		{[]string{"--key", "a", "--key", "b", "-x"}, "--exclusive and several keys: one kind"},
		{[]string{"a", "--key", "b", "--permits", "3"}, "--permits and several keys"},
		{[]string{"--permits", "0", "k"}, `"0" is not a number of permits`},
		{[]string{"--key", "a", "--key", "a"}, "InvalidArgument"},
		{[]string{"--fence-env", "SYNCGUARD_SLOT", "k"}, "not a usable variable name"},
	} {
		// No database at all: the error comes before any I/O.
		r := sg(t, "", append(append([]string{"run"}, c.args...), "--", "true")...)
		wantCode(t, r, 64)
		wantOneLineError(t, r, "syncguard: run: InvalidArgument: ")
		if !strings.Contains(r.stderr, c.want) {
			t.Errorf("%q: want %q in %s", c.args, c.want, r)
		}
	}
	// Without the kinds' tables (the mutex's database): say how to make them.
	d := dsn(t)
	for _, kind := range [][]string{{"--permits", "2"}, {"-s"}, {"--key", "a"}} {
		r := sg(t, d, append(append([]string{"run", "k"}, kind...), "true")...)
		wantCode(t, r, 70)
		if !strings.Contains(r.stderr, "run 'syncguard setup' first (--all for") {
			t.Errorf("%q without tables: %s", kind, r)
		}
	}
	// schema --all: the mutex's DDL, then each kind's, from --table.
	sch := sg(t, "", "schema", "--all", "--table", "app_locks")
	wantCode(t, sch, 0)
	for _, want := range []string{`"app_locks"`, `"app_locks_sem_slots"`, `"app_locks_rw"`, `"app_locks_ml"`} {
		if !strings.Contains(sch.stdout, want) {
			t.Errorf("schema --all should create %s", want)
		}
	}
	h := sg(t, "", "run", "--help")
	for _, want := range []string{"--permits N", "--shared", "--exclusive", "SYNCGUARD_FENCES", "SYNCGUARD_SLOT", "setup --all"} {
		if !strings.Contains(h.stdout, want) {
			t.Errorf("run --help should mention %q", want)
		}
	}
	if strings.Contains(h.stdout, "in any case") {
		t.Errorf("run --help still says waiting polls in any case")
	}
}

// releaseThen checks that blocked has not run while holders hold, lets
// the holders go (their release file), waits for them to exit 0 and
// returns blocked's result.
func releaseThen(t *testing.T, blocked *proc, what, release string, holders []*proc) result {
	t.Helper()
	select {
	case <-blocked.done:
		t.Fatalf("%s ran while the others held: %s", what, blocked.res)
	default:
	}
	os.WriteFile(release, nil, 0o644)
	for _, p := range holders {
		wantCode(t, p.wait(t, time.Minute), 0)
	}
	return blocked.wait(t, time.Minute)
}
