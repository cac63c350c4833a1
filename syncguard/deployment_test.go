package syncguard

import (
	"context"
	"database/sql"
	"errors"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
)

func TestSchemaLayout(t *testing.T) {
	l := schema()
	wantLocks := []colLayout{{"key", "text", true}, {"lock_id", "text", true}, {"expires_at_ms", "bigint", true},
		{"acquired_at_ms", "bigint", true}, {"fence", "text", true}, {"user_key", "text", true}}
	wantFences := []colLayout{{"fence_key", "text", true}, {"fence", "bigint", true}, {"key_debug", "text", false}}
	if !reflect.DeepEqual(l.locks.cols, wantLocks) || l.locks.pk != "key" {
		t.Errorf("lock table layout read from schema.sql: %+v (pk %q)", l.locks.cols, l.locks.pk)
	}
	if !reflect.DeepEqual(l.fences.cols, wantFences) || l.fences.pk != "fence_key" {
		t.Errorf("fence table layout read from schema.sql: %+v (pk %q)", l.fences.cols, l.fences.pk)
	}
	specs := l.locks.indexes("app_locks")
	var got []string
	for _, s := range specs {
		got = append(got, s.check+"|"+s.name+"|"+s.col+"|"+strings.SplitN(s.fix, "\n", 2)[0])
	}
	want := []string{
		`primary key||key|ALTER TABLE "app_locks" ADD PRIMARY KEY ("key");`,
		`lock_id index|idx_app_locks_lock_id|lock_id|CREATE UNIQUE INDEX IF NOT EXISTS "idx_app_locks_lock_id" ON "app_locks" ("lock_id");`,
		`expiry index|idx_app_locks_expires|expires_at_ms|CREATE INDEX IF NOT EXISTS "idx_app_locks_expires" ON "app_locks" ("expires_at_ms");`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("lock table indexes:\n got %q\nwant %q", got, want)
	}
	for _, ix := range l.locks.idx {
		if indexChecks[ix.placeholder] == "" {
			t.Errorf("index %s of schema.sql has no check name in indexChecks", ix.placeholder)
		}
	}
	if f := l.fences.indexes("app_fences"); len(f) != 1 || !f[0].primary || f[0].col != "fence_key" || f[0].check != "fence primary key" {
		t.Errorf("fence table indexes: %+v", f)
	}
}

// TestDeploymentGrantsCoverStatements: the privileges CheckDeployment asks
// for are exactly those the statement files use on each table.
var upsertRE = regexp.MustCompile(`INSERT INTO \{\{(locks|fences)\}\}[^;]*?ON CONFLICT[^;]*?DO UPDATE`)

func TestDeploymentGrantsCoverStatements(t *testing.T) {
	entries, err := sqlFiles.ReadDir("sql")
	if err != nil {
		t.Fatal(err)
	}
	use := map[string]map[string]bool{"locks": {}, "fences": {}}
	verbs := map[string]*regexp.Regexp{
		"INSERT": regexp.MustCompile(`INSERT INTO \{\{(locks|fences)\}\}`),
		"UPDATE": regexp.MustCompile(`UPDATE \{\{(locks|fences)\}\}`),
		"DELETE": regexp.MustCompile(`DELETE FROM \{\{(locks|fences)\}\}`),
		"SELECT": regexp.MustCompile(`(?:FROM|JOIN) \{\{(locks|fences)\}\}`),
	}
	for _, e := range entries {
		if e.Name() == "schema.sql" {
			continue // DDL, run once by the tables' owner
		}
		text := stripComments(mustRead(e.Name()))
		for verb, re := range verbs {
			for _, m := range re.FindAllStringSubmatch(text, -1) {
				use[m[1]][verb] = true
			}
		}
		// INSERT ... ON CONFLICT DO UPDATE updates, and reads.
		for _, m := range upsertRE.FindAllStringSubmatch(text, -1) {
			use[m[1]]["UPDATE"] = true
		}
		if strings.Contains(text, "ON CONFLICT") || strings.Contains(text, "RETURNING") {
			for _, tbl := range []string{"locks", "fences"} {
				if strings.Contains(text, "{{"+tbl+"}}") {
					use[tbl]["SELECT"] = true
				}
			}
		}
	}
	for tbl, want := range map[string][]string{"locks": lockTablePrivileges, "fences": fenceTablePrivileges} {
		var got []string
		for v := range use[tbl] {
			got = append(got, v)
		}
		slices.Sort(got)
		w := slices.Clone(want)
		slices.Sort(w)
		if !slices.Equal(got, w) {
			t.Errorf("%s: the statements use %v, CheckDeployment asks for %v", tbl, got, w)
		}
	}
}

func TestCheckDeploymentRejectsBadInputBeforeIO(t *testing.T) {
	if _, err := CheckDeployment(context.Background(), nil, nil); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("nil db: %v", err)
	}
	if _, err := CheckDeployment(context.Background(), &sql.DB{}, &Config{TableName: "bad-name"}); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("bad table name: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := CheckDeployment(ctx, &sql.DB{}, nil); !errors.Is(err, ErrAborted) {
		t.Errorf("cancelled context: %v", err)
	}
}

func TestReportErr(t *testing.T) {
	r := Report{Findings: []Finding{{Check: "a", Status: "ok"}, {Check: "b", Status: "warn"}}}
	if !r.OK() || r.Err() != nil {
		t.Errorf("warnings only: OK %v, Err %v", r.OK(), r.Err())
	}
	r.Findings = append(r.Findings, Finding{Check: "lock table privileges", Status: "fail", Detail: "role app lacks DELETE"})
	err := r.Err()
	if r.OK() || err == nil || !strings.Contains(err.Error(), "lock table privileges: role app lacks DELETE") || !errors.Is(err, ErrInternal) {
		t.Errorf("a failed check: OK %v, Err %v", r.OK(), err)
	}
}
