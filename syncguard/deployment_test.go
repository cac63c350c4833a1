package syncguard

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/syncguard/syncguard-go/internal/deploy"
)

// TestDeploymentGrantsCoverStatements: the privileges doctor.Check asks
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
			t.Errorf("%s: the statements use %v, doctor.Check asks for %v", tbl, got, w)
		}
	}
}
