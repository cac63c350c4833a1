package syncguard

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/syncguard/syncguard-go/internal/deploy"
)

// TestDeploymentGrantsCoverStatements: the privileges CheckDeployment asks
// for are exactly those the statement files use on each table.
var upsertRE = regexp.MustCompile(`INSERT INTO \{\{(locks|fences|waiters)\}\}[^;]*?ON CONFLICT[^;]*?DO UPDATE`)

func TestDeploymentGrantsCoverStatements(t *testing.T) {
	entries, err := sqlFiles.ReadDir("sql")
	if err != nil {
		t.Fatal(err)
	}
	use := map[string]map[string]bool{"locks": {}, "fences": {}, "waiters": {}}
	verbs := map[string]*regexp.Regexp{
		"INSERT": regexp.MustCompile(`INSERT INTO \{\{(locks|fences|waiters)\}\}`),
		"UPDATE": regexp.MustCompile(`UPDATE \{\{(locks|fences|waiters)\}\}`),
		"DELETE": regexp.MustCompile(`DELETE FROM \{\{(locks|fences|waiters)\}\}`),
		"SELECT": regexp.MustCompile(`(?:FROM|JOIN) \{\{(locks|fences|waiters)\}\}`),
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
			for _, tbl := range []string{"locks", "fences", "waiters"} {
				if strings.Contains(text, "{{"+tbl+"}}") {
					use[tbl]["SELECT"] = true
				}
			}
		}
	}
	for tbl, want := range map[string][]string{"locks": deploy.LockTablePrivileges, "fences": deploy.FenceTablePrivileges, "waiters": deploy.WaitersTablePrivileges} {
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

// A Finding's JSON is what `syncguard doctor --json` prints for a check:
// lower-case names, no fix when there is none.
func TestFindingJSON(t *testing.T) {
	for f, want := range map[Finding]string{
		{Check: "fsync", Status: "warn", Detail: "off", Fix: "fsync = on"}: `{"check":"fsync","status":"warn","detail":"off","fix":"fsync = on"}`,
		{Check: "clock", Status: "ok", Detail: "in sync"}:                  `{"check":"clock","status":"ok","detail":"in sync"}`,
	} {
		if got, err := json.Marshal(f); err != nil || string(got) != want {
			t.Errorf("json.Marshal(%+v) = %s, %v; want %s", f, got, err, want)
		}
	}
}
