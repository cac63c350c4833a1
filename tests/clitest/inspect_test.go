//go:build unix

package clitest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/syncguard/syncguard-go/syncguard"
	"github.com/syncguard/syncguard-go/tests/pgtest"
)

// decode parses r's stdout as one JSON object.
func decode(t *testing.T, r result) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &m); err != nil {
		t.Fatalf("stdout is not a JSON object: %v\n%s", err, r)
	}
	return m
}

// shape checks that m has exactly the fields of want, with their JSON
// types: "string", "bool", "number", "array", "object", "null", or
// "string|null".
func shape(t *testing.T, what string, m map[string]any, want map[string]string) {
	t.Helper()
	for k, typ := range want {
		v, ok := m[k]
		if !ok {
			t.Errorf("%s: field %q missing in %v", what, k, m)
			continue
		}
		if got := jsonType(v); !strings.Contains("|"+typ+"|", "|"+got+"|") {
			t.Errorf("%s: field %q is %s (%v), want %s", what, k, got, v, typ)
		}
	}
	for k := range m {
		if _, ok := want[k]; !ok {
			t.Errorf("%s: unexpected field %q", what, k)
		}
	}
}

func jsonType(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case string:
		return "string"
	case bool:
		return "bool"
	case float64:
		return "number"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return "?"
}

var rfc3339ms = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$`)

func TestStatusJSON(t *testing.T) {
	t.Parallel()
	d := dsn(t)
	b := backend(t, openDB(t, d), nil)
	k := key(t, "k")

	r0 := sg(t, d, "status", "--json", k)
	wantCode(t, r0, 1) // free
	free := decode(t, r0)
	shape(t, "status (never acquired)", free, map[string]string{
		"key": "string", "keyHash": "string", "held": "bool", "serverTime": "string", "lastFence": "null"})

	res, err := b.Acquire(ctxT(t), k, time.Minute)
	if err != nil || !res.OK {
		t.Fatalf("acquire: %+v %v", res, err)
	}
	rh := sg(t, d, "status", k, "--json", "--raw")
	wantCode(t, rh, 0) // held
	held := decode(t, rh)
	shape(t, "status --raw (held)", held, map[string]string{
		"key": "string", "keyHash": "string", "held": "bool", "serverTime": "string", "lastFence": "string",
		"fence": "string", "acquiredAt": "string", "expiresAt": "string", "expiresInMs": "number",
		"lockIdHash": "string", "identity": "string", "lockId": "string"})
	if held["held"] != true || held["fence"] != string(res.Fence) || held["lockId"] != res.LockID ||
		held["lockIdHash"] != syncguard.HashKey(res.LockID) || held["keyHash"] != syncguard.HashKey(k) {
		t.Errorf("status --json: %v", held)
	}
	if ms := held["expiresInMs"].(float64); ms < 50_000 || ms > 61_000 {
		t.Errorf("expiresInMs = %v for a 1m lock", ms)
	}
	for _, f := range []string{"serverTime", "acquiredAt", "expiresAt"} {
		if !rfc3339ms.MatchString(held[f].(string)) {
			t.Errorf("%s = %q, want RFC 3339 UTC with milliseconds", f, held[f])
		}
	}
	b.Release(ctxT(t), res.LockID)
	after := decode(t, sg(t, d, "status", "--json", k))
	if after["held"] != false || after["lastFence"] != string(res.Fence) {
		t.Errorf("after release: %v", after)
	}

	// Errors are JSON on stdout too, besides the line on stderr.
	srv := pgtest.Require(t)
	r := sg(t, "", "status", "--json", "--dsn", srv.RefusedDSN(), k)
	wantCode(t, r, 69)
	e := decode(t, r)
	shape(t, "error", e, map[string]string{"error": "object"})
	shape(t, "error.error", e["error"].(map[string]any), map[string]string{
		"command": "string", "code": "string", "message": "string", "exitStatus": "number"})
}

func TestLs(t *testing.T) {
	t.Parallel()
	d := dsn(t)
	n := uniq()
	locksT, fencesT := fmt.Sprintf("ls_test_locks_%d", n), fmt.Sprintf("ls_test_fences_%d", n)
	tables := []string{"--table", locksT, "--fence-table", fencesT}
	wantCode(t, sg(t, d, append([]string{"setup"}, tables...)...), 0)
	b := backend(t, openDB(t, d), &syncguard.Config{TableName: locksT, FenceTableName: fencesT})
	ctx := ctxT(t)

	r := sg(t, d, append([]string{"ls"}, tables...)...)
	wantCode(t, r, 0)
	if strings.TrimSpace(r.stdout) != "no active locks" {
		t.Errorf("empty ls: %s", r)
	}

	old, err := b.Acquire(ctx, "secret:customer@example.com:expired", time.Millisecond)
	if err != nil || !old.OK {
		t.Fatal(old, err)
	}
	time.Sleep(1100 * time.Millisecond) // past the 1s tolerance
	var keys []string
	var ids []string
	for i, k := range []string{"secret:alice@example.com", "secret:bob@example.com", "secret:carol@example.com"} {
		res, err := b.Acquire(ctx, k, time.Duration(i+1)*time.Minute)
		if err != nil || !res.OK {
			t.Fatal(res, err)
		}
		keys, ids = append(keys, k), append(ids, res.LockID)
		time.Sleep(15 * time.Millisecond) // distinct acquisition times
	}

	r = sg(t, d, append([]string{"ls"}, tables...)...)
	wantCode(t, r, 0)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "KEY") {
		t.Fatalf("want a header and 3 locks: %s", r)
	}
	for i := range 3 {
		// newest first
		k := keys[2-i]
		if !strings.Contains(lines[i+1], "key#"+syncguard.HashKey(k)) || !strings.Contains(lines[i+1], "lock#"+syncguard.HashKey(ids[2-i])) {
			t.Errorf("line %d should be %q (newest first): %s", i+1, k, r)
		}
	}
	if strings.Contains(r.stdout, "example.com") || strings.Contains(r.stdout, ids[0]) {
		t.Errorf("ls shows raw keys or lockIds without --raw: %s", r)
	}
	if strings.Contains(r.stdout, syncguard.HashKey("secret:customer@example.com:expired")) {
		t.Errorf("ls shows an expired lock without --expired: %s", r)
	}

	r = sg(t, d, append([]string{"ls", "--raw", "--expired"}, tables...)...)
	wantCode(t, r, 0)
	if !strings.Contains(r.stdout, "alice@example.com") || !strings.Contains(r.stdout, ids[0]) || !strings.Contains(r.stderr, "sensitive") {
		t.Errorf("ls --raw: %s", r)
	}
	if !regexp.MustCompile(`customer@example.com:expired .* expired\s*$`).MatchString(strings.Split(strings.TrimSpace(r.stdout), "\n")[4]) {
		t.Errorf("ls --expired should list the expired row last, marked expired: %s", r)
	}

	r = sg(t, d, append([]string{"ls", "--json", "--limit", "2"}, tables...)...)
	wantCode(t, r, 0)
	m := decode(t, r)
	shape(t, "ls", m, map[string]string{"serverTime": "string", "locks": "array", "truncated": "bool"})
	locks := m["locks"].([]any)
	if len(locks) != 2 || m["truncated"] != true {
		t.Fatalf("ls --limit 2: %s", r)
	}
	l0 := locks[0].(map[string]any)
	shape(t, "ls lock", l0, map[string]string{"keyHash": "string", "lockIdHash": "string", "identity": "string", "fence": "string",
		"acquiredAt": "string", "expiresAt": "string", "expiresInMs": "number", "live": "bool"})
	if l0["keyHash"] != syncguard.HashKey(keys[2]) || l0["live"] != true {
		t.Errorf("first lock should be the newest: %v", l0)
	}
	m = decode(t, sg(t, d, append([]string{"ls", "--json", "--raw", "--expired"}, tables...)...))
	if n := len(m["locks"].([]any)); n != 4 {
		t.Errorf("ls --expired --json: %d locks, want 4", n)
	}
	shape(t, "ls --raw lock", m["locks"].([]any)[3].(map[string]any), map[string]string{"keyHash": "string", "lockIdHash": "string", "identity": "string",
		"fence": "string", "acquiredAt": "string", "expiresAt": "string", "expiresInMs": "number", "live": "bool",
		"key": "string", "lockId": "string"})
}

func TestSchemaAndSetup(t *testing.T) {
	t.Parallel()
	d := dsn(t)
	want, _ := syncguard.SchemaSQL(nil)
	r := sg(t, "", "schema") // no database needed
	wantCode(t, r, 0)
	if r.stdout != want {
		t.Errorf("schema output differs from syncguard.SchemaSQL:\n%s", r.stdout)
	}
	r = sg(t, "", "schema", "--table", "app_locks", "--fence-table", "app_fences", "--json")
	wantCode(t, r, 0)
	m := decode(t, r)
	shape(t, "schema", m, map[string]string{"table": "string", "fenceTable": "string", "sql": "string"})
	if !strings.Contains(m["sql"].(string), `CREATE TABLE IF NOT EXISTS "app_locks"`) {
		t.Errorf("schema --table: %v", m["sql"])
	}
	r = sg(t, d, "setup", "--json", "--table", "setup_test_locks", "--fence-table", "setup_test_fences")
	wantCode(t, r, 0)
	shape(t, "setup", decode(t, r), map[string]string{"ok": "bool", "table": "string", "fenceTable": "string"})
	wantCode(t, sg(t, d, "setup", "--table", "setup_test_locks", "--fence-table", "setup_test_fences"), 0) // idempotent
}

// doctorFindings runs doctor --json and returns its exit status and the
// findings by check name.
func doctorFindings(t *testing.T, dsn string, args ...string) (int, map[string]map[string]any) {
	t.Helper()
	r := start(t, env(dsn), append([]string{"doctor", "--json"}, args...)...).wait(t, time.Minute)
	m := decode(t, r)
	shape(t, "doctor", m, map[string]string{"ok": "bool", "failed": "number", "warnings": "number", "checks": "array"})
	out := map[string]map[string]any{}
	for _, c := range m["checks"].([]any) {
		f := c.(map[string]any)
		out[f["check"].(string)] = f
	}
	return r.code, out
}

func wantFinding(t *testing.T, fs map[string]map[string]any, check, status, fixPart string) {
	t.Helper()
	f, ok := fs[check]
	if !ok {
		t.Errorf("no %q finding in %v", check, fs)
		return
	}
	if f["status"] != status {
		t.Errorf("%s: status %v, want %s (%v)", check, f["status"], status, f)
	}
	if fixPart != "" && !strings.Contains(f["fix"].(string), fixPart) {
		t.Errorf("%s: fix %q lacks %q", check, f["fix"], fixPart)
	}
}

func TestDoctor(t *testing.T) {
	t.Parallel()
	srv := pgtest.Require(t)
	dbName, d := freshDB(t, "cli_doctor")
	db := openDB(t, d)

	code, fs := doctorFindings(t, d)
	if code != 1 {
		t.Errorf("doctor without tables: exit %d, want 1", code)
	}
	wantFinding(t, fs, "lock table", "fail", "syncguard setup")
	wantFinding(t, fs, "fence table", "fail", "syncguard setup")
	wantFinding(t, fs, "connection", "ok", "")

	wantCode(t, sg(t, d, "setup"), 0)
	code, fs = doctorFindings(t, d)
	for _, c := range []string{"lock table", "primary key", "lock_id index", "expiry index", "lock table privileges",
		"fence table", "fence primary key", "fence table privileges", "fence counters", "lock rows", "synchronous_commit",
		"clock", "pooler", "prepared statements"} {
		wantFinding(t, fs, c, "ok", "")
	}
	if srv.Kind != pgtest.KindEnv && code != 0 {
		t.Errorf("doctor on a healthy throwaway server: exit %d, findings %v", code, fs)
	}

	// Break the schema: drop the unique index on lock_id.
	if _, err := db.ExecContext(ctxT(t), `DROP INDEX "idx_syncguard_locks_lock_id"`); err != nil {
		t.Fatal(err)
	}
	code, fs = doctorFindings(t, d)
	if code != 1 {
		t.Errorf("doctor with a dropped index: exit %d, want 1", code)
	}
	wantFinding(t, fs, "lock_id index", "fail", `CREATE UNIQUE INDEX IF NOT EXISTS "idx_syncguard_locks_lock_id" ON "syncguard_locks" ("lock_id");`)
	wantFinding(t, fs, "expiry index", "ok", "")
	r := sg(t, d, "doctor")
	wantCode(t, r, 1)
	if !regexp.MustCompile(`(?m)^FAIL\s+lock_id index\s+no valid unique index`).MatchString(r.stdout) ||
		!strings.Contains(r.stdout, "fix: CREATE UNIQUE INDEX") || !strings.Contains(r.stdout, "1 problem") {
		t.Errorf("doctor human output: %s", r)
	}
	// An index of that name on the wrong column: drop it first, says the fix.
	if _, err := db.ExecContext(ctxT(t), `CREATE INDEX "idx_syncguard_locks_lock_id" ON "syncguard_locks" ("user_key")`); err != nil {
		t.Fatal(err)
	}
	_, fs = doctorFindings(t, d)
	wantFinding(t, fs, "lock_id index", "fail", `DROP INDEX "idx_syncguard_locks_lock_id";`)
	if _, err := db.ExecContext(ctxT(t), `DROP INDEX "idx_syncguard_locks_lock_id"`); err != nil {
		t.Fatal(err)
	}
	wantCode(t, sg(t, d, "setup"), 0) // repairs it
	_, fs = doctorFindings(t, d)
	wantFinding(t, fs, "lock_id index", "ok", "")

	// A session with synchronous_commit off.
	sep := "?"
	if strings.Contains(d, "?") {
		sep = "&"
	}
	if strings.HasPrefix(d, "postgres") {
		_, fs = doctorFindings(t, d+sep+"synchronous_commit=off")
		wantFinding(t, fs, "synchronous_commit", "fail", "synchronous_commit = on")
	}

	// A role without privileges on the tables.
	if srv.PasswordRole != "" {
		_, fs = doctorFindings(t, "", "--dsn", srv.DSNFor(srv.PasswordRole, srv.Password, dbName))
		wantFinding(t, fs, "lock table privileges", "fail", `GRANT SELECT, INSERT, UPDATE, DELETE ON "syncguard_locks" TO "`+srv.PasswordRole+`";`)
		wantFinding(t, fs, "fence table privileges", "fail", `GRANT SELECT, INSERT, UPDATE ON "syncguard_fence_counters"`)
	}

	// Unreachable: exit 69, and the finding says where the settings came from.
	code, fs = doctorFindings(t, "", "--dsn", srv.RefusedDSN())
	if code != 69 {
		t.Errorf("doctor on a refused connection: exit %d, want 69", code)
	}
	wantFinding(t, fs, "connection", "fail", "--dsn")
}

const registryDoc = `# PostgreSQL Advisory Locks Registry

### Hardcoded Lock IDs (Global)

| Lock ID | Component | Purpose | Scope | Lock Type | File Reference |
|---------|-----------|---------|-------|-----------|----------------|
| ` + "`42424242`" + ` | IdempotencyService | Cleanup scheduler coordination | Global | Session (` + "`pg_try_advisory_lock`" + `) | ` + "`server/src/services/idempotency.service.ts:41`" + ` |

### Dynamically Generated Lock IDs (FNV-1a Hash)

| Hash Input Pattern | Component | Purpose | Scope | Lock Type | File Reference |
|-------------------|-----------|---------|-------|-----------|----------------|
| ` + "`{tenantId}:{date}`" + ` | BookingRepository | Booking creation race prevention | Per tenant+date | Transaction | x |
`

func TestAdvisoryLs(t *testing.T) {
	t.Parallel()
	_, d := freshDB(t, "cli_advisory")
	db := openDB(t, d)
	ctx := ctxT(t)
	reg := filepath.Join(t.TempDir(), "advisory-locks.md")
	if err := os.WriteFile(reg, []byte(registryDoc), 0o644); err != nil {
		t.Fatal(err)
	}

	r := sg(t, d, "advisory", "ls")
	wantCode(t, r, 0)
	if !strings.Contains(r.stdout, "no advisory locks") {
		t.Errorf("advisory ls with none: %s", r)
	}

	holder, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	var holderPID int
	if err := holder.QueryRowContext(ctx, `SELECT pg_backend_pid()`).Scan(&holderPID); err != nil {
		t.Fatal(err)
	}
	if _, err := holder.ExecContext(ctx, `SELECT pg_advisory_lock(42424242)`); err != nil {
		t.Fatal(err)
	}
	waiter, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer waiter.Close()
	waited := make(chan error, 1)
	go func() {
		_, err := waiter.ExecContext(context.Background(), `SELECT pg_advisory_lock(42424242)`)
		waited <- err
	}()
	deadline := time.Now().Add(20 * time.Second)
	for {
		var n int
		db.QueryRowContext(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted`).Scan(&n)
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the waiter never waited")
		}
		time.Sleep(20 * time.Millisecond)
	}

	r = sg(t, d, "advisory", "ls", "--registry", reg)
	wantCode(t, r, 0)
	if !regexp.MustCompile(`42424242\s+IdempotencyService: Cleanup scheduler coordination\s+held`).MatchString(r.stdout) ||
		!regexp.MustCompile(`42424242\s+IdempotencyService: Cleanup scheduler coordination\s+waiting`).MatchString(r.stdout) {
		t.Errorf("advisory ls --registry: %s", r)
	}

	r = sg(t, d, "advisory", "ls", "--waiting", "--json", "--registry", reg)
	wantCode(t, r, 0)
	m := decode(t, r)
	shape(t, "advisory ls", m, map[string]string{"serverTime": "string", "locks": "array"})
	locks := m["locks"].([]any)
	if len(locks) != 1 {
		t.Fatalf("--waiting: want 1 waiter: %s", r)
	}
	w := locks[0].(map[string]any)
	shape(t, "advisory lock", w, map[string]string{"lock": "string", "id": "string", "scope": "string", "name": "string", "granted": "bool",
		"mode": "string", "pid": "number", "blockedBy": "array", "applicationName": "string", "state": "string",
		"waitStart": "string|null", "xactStart": "string|null", "queryStart": "string|null"})
	if w["granted"] != false || w["lock"] != "42424242" || len(w["blockedBy"].([]any)) != 1 ||
		w["blockedBy"].([]any)[0] != float64(holderPID) {
		t.Errorf("waiter: %v (holder pid %d)", w, holderPID)
	}

	if _, err := holder.ExecContext(ctx, `SELECT pg_advisory_unlock(42424242)`); err != nil {
		t.Fatal(err)
	}
	if err := <-waited; err != nil {
		t.Fatal(err)
	}
	waiter.ExecContext(ctx, `SELECT pg_advisory_unlock_all()`)
}

func TestVersion(t *testing.T) {
	t.Parallel()
	r := sg(t, "", "version")
	wantCode(t, r, 0)
	if !strings.HasPrefix(r.stdout, "syncguard ") {
		t.Errorf("version: %s", r)
	}
	wantCode(t, sg(t, "", "--version"), 0)
}

// startPgBouncer starts a PgBouncer in front of srv. Without one
// installed, the test is skipped, or fails in a CI job (pgtest.InCI; .ci/run installs
// it).
func startPgBouncer(t *testing.T, srv *pgtest.Server, opts pgtest.PgBouncerOptions) *pgtest.PgBouncer {
	t.Helper()
	if srv.Kind == pgtest.KindEnv {
		t.Skip("PgBouncer needs a throwaway server")
	}
	if _, err := pgtest.PgBouncerBinary(); err != nil {
		if _, ci := pgtest.InCI(); ci {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := srv.StartPgBouncer(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Stop() })
	return b
}

// Item 3: behind PgBouncer in transaction mode, run (with many extends),
// status (called repeatedly), ls and advisory ls work with the defaults;
// doctor passes with warnings, and its advice works when followed
// literally.
func TestThroughPgBouncer(t *testing.T) {
	t.Parallel()
	srv := pgtest.Require(t)
	direct := dsn(t) // the database syncguard_cli, with the schema

	t.Run("transaction mode", func(t *testing.T) {
		t.Parallel()
		b := startPgBouncer(t, srv, pgtest.PgBouncerOptions{PoolMode: "transaction", DefaultPoolSize: 2})
		d := b.DSNFor("", "", "syncguard_cli")

		// run with a short TTL (an extend every 1.3 s, each with 1.4 s to
		// spare), until the test has seen four extends on the server.
		k := key(t, "k")
		dir := t.TempDir()
		p := start(t, env(d), "run", "--key", k, "--ttl", "4", "--", "sh", "-c",
			fmt.Sprintf(`echo "$SYNCGUARD_FENCE" > %[1]s/fence; while [ ! -e %[1]s/go ]; do sleep 0.05; done`, dir))
		waitFile(t, filepath.Join(dir, "fence"), time.Minute)
		// A second run waits for the key meanwhile: no notification comes
		// through the pooler, so its waiting polls, silently, and it gets
		// the key after the release.
		waiter := start(t, env(d), "run", "--key", k, "--wait", "5m", "--", "sh", "-c", `echo "$SYNCGUARD_FENCE"`)
		db := openDB(t, direct)
		seen := map[int64]bool{}
		deadline := time.Now().Add(2 * time.Minute)
		for len(seen) < 5 {
			var exp int64
			if err := db.QueryRowContext(ctxT(t), `SELECT expires_at_ms FROM syncguard_locks WHERE user_key = $1`, k).Scan(&exp); err != nil {
				t.Fatalf("the lock row: %v (stderr: %s)", err, p.stderr.String())
			}
			seen[exp] = true
			if time.Now().After(deadline) {
				t.Fatalf("only %d extends within 2m through PgBouncer; stderr: %s", len(seen)-1, p.stderr.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
		for range 3 { // status used to fail from its second call
			r := sg(t, d, "status", k)
			wantCode(t, r, 0)
		}
		r := sg(t, d, "ls", "--json")
		wantCode(t, r, 0)
		if locks := decode(t, r)["locks"].([]any); len(locks) == 0 {
			t.Errorf("ls through PgBouncer lists nothing: %s", r)
		}
		wantCode(t, sg(t, d, "advisory", "ls"), 0)
		if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		r = p.wait(t, time.Minute)
		wantCode(t, r, 0)
		if r.stderr != "" {
			t.Errorf("run through PgBouncer printed on stderr: %s", r)
		}
		r = waiter.wait(t, time.Minute)
		wantCode(t, r, 0)
		if r.stderr != "" || len(strings.TrimSpace(r.stdout)) != 15 {
			t.Errorf("a run waiting through PgBouncer must get the key after the release, print its fence and nothing on stderr: %s", r)
		}
		for range 3 {
			r := sg(t, d, "status", "--json", k)
			wantCode(t, r, 1) // free
			if m := decode(t, r); m["held"] != false || len(m["lastFence"].(string)) != 15 {
				t.Errorf("status through PgBouncer: %v", m)
			}
		}

		// doctor with the defaults: exit 0, with a warning for the pooler;
		// the CLI does not prepare.
		code, fs := doctorFindings(t, d)
		if code != 0 {
			t.Errorf("doctor through PgBouncer with the defaults: exit %d: %v", code, fs)
		}
		wantFinding(t, fs, "pooler", "warn", "session-scoped advisory locks do not")
		wantFinding(t, fs, "lock table", "ok", "")
		wantFinding(t, fs, "prepared statements", "ok", "")
		if !strings.Contains(fs["prepared statements"]["detail"].(string), "--no-prepare, the default") {
			t.Errorf("prepared statements: %v", fs["prepared statements"])
		}

		// Preparing on purpose fails behind PgBouncer before 1.21; doctor
		// says so, and following its advice literally fixes it.
		if b.Version >= "1.21" {
			return
		}
		r = start(t, env(d, "SYNCGUARD_NO_PREPARE=false"), "doctor", "--json").wait(t, time.Minute)
		wantCode(t, r, 1)
		fix := ""
		for _, c := range decode(t, r)["checks"].([]any) {
			if f := c.(map[string]any); f["check"] == "prepared statements" && f["status"] == "fail" {
				fix = f["fix"].(string)
			}
		}
		if !strings.Contains(fix, "drop --no-prepare=false (or SYNCGUARD_NO_PREPARE=false)") {
			t.Fatalf("doctor with SYNCGUARD_NO_PREPARE=false: want a failed prepared-statements check with advice, got %q: %s", fix, r)
		}
		// Followed: the variable dropped.
		if code, fs := doctorFindings(t, d); code != 0 {
			t.Errorf("doctor after following its advice: exit %d: %v", code, fs)
		}
		// The advice for programs, followed by the CLI's own connection
		// string: default_query_exec_mode=exec turns preparing off.
		withExec := d + "&default_query_exec_mode=exec"
		if !strings.Contains(d, "?") {
			withExec = d + "?default_query_exec_mode=exec"
		}
		r = start(t, env(withExec, "SYNCGUARD_NO_PREPARE=false"), "doctor", "--json").wait(t, time.Minute)
		wantCode(t, r, 0)
		r = start(t, env(withExec, "SYNCGUARD_NO_PREPARE=false"), "run", "--key", k, "--", "true").wait(t, time.Minute)
		wantCode(t, r, 0)
	})
	t.Run("session mode", func(t *testing.T) {
		t.Parallel()
		b := startPgBouncer(t, srv, pgtest.PgBouncerOptions{PoolMode: "session"})
		_, fs := doctorFindings(t, b.DSNFor("", "", "syncguard_cli"))
		wantFinding(t, fs, "pooler", "ok", "")
		wantFinding(t, fs, "prepared statements", "ok", "")
	})
}
