package conformance

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/syncguard/syncguard-go/internal/rules"
)

// Tables the suite creates are named sgc_<created>_<random>_<what>, where
// <created> is the creation time in Unix seconds as 8 hex digits: a later
// run can tell the tables a crashed run left behind from those of a run
// going on right now, without any catalog of its own.
var suiteTableRE = regexp.MustCompile(`^sgc_([0-9a-f]{8})_[0-9a-f]{6}_[a-z_]+$`)

// leftoverAge: tables of the suite older than this are dropped at the start
// of a run. No case runs that long.
const leftoverAge = time.Hour

// suiteTable returns a new table name of the suite ending in _what; what
// is lowercase letters and underscores.
func suiteTable(what string) string {
	return fmt.Sprintf("sgc_%08x_%s_%s", time.Now().Unix(), randHex(3), what)
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// preflight runs once before the cases of Run and RunAdvisory. It connects,
// checks that the role may create the cases' tables in its current schema
// (failing once, with the GRANT that fixes it, instead of failing every
// case with the same error), and drops the tables a crashed run left
// behind.
func preflight(t *testing.T, h Harness) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), h.CaseTimeout)
	defer cancel()
	db := h.Open(t)
	var (
		user, schema string
		canCreate    bool
	)
	err := db.QueryRowContext(ctx, `SELECT current_user::text, coalesce(current_schema()::text, ''),
       coalesce(has_schema_privilege(current_schema(), 'CREATE'), false)`).Scan(&user, &schema, &canCreate)
	if err != nil {
		t.Fatalf("conformance: preflight: cannot query the database under test (connection, credentials, server up?): %v", err)
	}
	switch {
	case schema == "":
		t.Fatalf("conformance: preflight: role %s has no current schema (no schema of its search_path exists or is usable); the suite creates its sgc_* tables there: set search_path, or run as the owner: CREATE SCHEMA %s AUTHORIZATION %s;",
			rules.QuoteIdent(user), rules.QuoteIdent(user), rules.QuoteIdent(user))
	case !canCreate:
		why := ""
		if schema == "public" {
			why = " (since PostgreSQL 15 only the owner of schema public may create in it by default)"
		}
		t.Fatalf("conformance: preflight: role %s may not create tables in schema %s%s, and every case creates and drops its own sgc_* tables there; as the schema's owner run: GRANT CREATE ON SCHEMA %s TO %s;",
			rules.QuoteIdent(user), rules.QuoteIdent(schema), why, rules.QuoteIdent(schema), rules.QuoteIdent(user))
	}
	sweepLeftovers(ctx, t, db)
}

// sweepLeftovers drops the suite's tables (and the trigger functions of
// Statements/ReleaseSkipsOnlyItsOwnFlush) in the current schema that are
// older than leftoverAge. One it cannot drop (another role's) is logged
// and kept.
func sweepLeftovers(ctx context.Context, t *testing.T, db *sql.DB) {
	t.Helper()
	rows, err := db.QueryContext(ctx, `SELECT 'TABLE', c.relname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p') AND c.relname LIKE 'sgc\_%'
UNION ALL
SELECT 'FUNCTION', p.proname::text FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
WHERE n.nspname = current_schema() AND p.proname LIKE 'sgc\_%'`)
	if err != nil {
		t.Logf("conformance: preflight: listing leftover tables: %v", err)
		return
	}
	type object struct{ kind, name string }
	var old []object
	for rows.Next() {
		var o object
		if err := rows.Scan(&o.kind, &o.name); err != nil {
			t.Logf("conformance: preflight: listing leftover tables: %v", err)
			break
		}
		if leftover(o.name, time.Now()) {
			old = append(old, o)
		}
	}
	rows.Close()
	for _, o := range old {
		if _, err := db.ExecContext(ctx, `DROP `+o.kind+` IF EXISTS `+rules.QuoteIdent(o.name)+` CASCADE`); err != nil {
			t.Logf("conformance: preflight: dropping leftover %s %s: %v", strings.ToLower(o.kind), o.name, err)
			continue
		}
	}
	if len(old) > 0 {
		t.Logf("conformance: preflight: dropped %d tables and functions left by earlier runs (older than %v)", len(old), leftoverAge)
	}
}

// leftover reports whether name is a suite table created more than
// leftoverAge before now.
func leftover(name string, now time.Time) bool {
	m := suiteTableRE.FindStringSubmatch(name)
	if m == nil {
		return false
	}
	sec, err := strconv.ParseInt(m[1], 16, 64)
	if err != nil {
		return false
	}
	return now.Sub(time.Unix(sec, 0)) > leftoverAge
}
