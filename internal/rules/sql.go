package rules

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// The rules as SQL. Statement files refer to them as template calls, which
// Render expands:
//
//	{{now_ms}}                  the server's clock in ms (NowMsSQL)
//	{{live(alias)}}             alias's lock is live at t.now_ms (LiveSQL)
//	{{live(alias, now)}}        ... live at the instant now
//	{{fence_text(expr)}}        the fence number expr as fence text
//	{{fence_max}}               FenceMax
//	{{cleanup_grace}}           CleanupGraceMs
//	{{async_release_max}}       AsyncReleaseMaxMs
//	{{gate_held_privileged(k)}} GateHeldSQL over the storage key k
//	{{storage_key(k)}}          StorageKeySQL of the user key k
//
// plus the names the caller passes (table and index identifiers).

// NowMsSQL is the server's clock as every statement reads it, in whole
// milliseconds since the Unix epoch (docs/spec.md T1: the server is the time
// authority). A statement reads it once, in a CTE (WITH t AS (SELECT
// {{now_ms}} AS now_ms): a volatile CTE is evaluated once), while it
// executes: after its snapshot was taken, so the clock is never earlier
// than the commit of any row version the statement sees (a lock taken just
// after a release is never stamped before that release; statement_timestamp
// is taken when the statement arrives, before it is planned, and was up to
// milliseconds earlier on a loaded server).
const NowMsSQL = `floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint`

// LiveSQL is IsLive in SQL: the lock row alias is live at the instant now
// (a bigint of milliseconds, usually t.now_ms).
func LiveSQL(alias, now string) string {
	return fmt.Sprintf(`%s."expires_at_ms" > %s - %d`, alias, now, ToleranceMs-brokenLiveMs)
}

// FenceTextSQL is FormatFence in SQL, for a fence number expr that is
// already within bounds (the acquire statement refuses to pass FenceMax).
func FenceTextSQL(expr string) string {
	return fmt.Sprintf(`lpad((%s)::text, %d, '0')`, expr, FenceDigits)
}

// GateHeldSQL is whether a session other than this one, of a role that
// may update the lock table locks, holds the advisory lock hashtext(key)
// (any mode, granted). Any role can take advisory locks: held by no such
// session, the lock is held by roles that cannot touch the lock tables
// (design.md, "The advisory try-lock: a hint, not a gate"). A lock with no
// backend (pid NULL) is a prepared transaction's, which any role may
// leave behind where max_prepared_transactions > 0: it counts when its
// owner (pg_prepared_xacts, readable by every role) may update the table.
// PostgreSQL shows a prepared transaction's locks under the virtual
// transaction id of the session that prepared it (15) or -1/xid (before
// 13); its transactionid lock carries the same virtual transaction id and
// its xid. A holder whose owner cannot be found (it ended meanwhile, or
// its role was dropped) counts. Reading pg_locks takes every lock-manager
// partition's lock: a key's first acquire only (placeholder.sql).
func GateHeldSQL(key, locks string) string {
	return fmt.Sprintf(`EXISTS (
  SELECT 1 FROM pg_catalog.pg_locks AS pl
  LEFT JOIN pg_catalog.pg_stat_activity AS sa ON sa."pid" = pl."pid"
  WHERE pl."locktype" = 'advisory' AND pl."granted" AND pl."objsubid" = 1
    AND pl."database" = (SELECT d."oid" FROM pg_catalog.pg_database AS d WHERE d."datname" = current_database())
    AND pl."classid" = ((hashtext(%[1]s)::bigint >> 32) & 4294967295)::oid
    AND pl."objid" = (hashtext(%[1]s)::bigint & 4294967295)::oid
    AND pl."pid" IS DISTINCT FROM pg_backend_pid()
    AND CASE WHEN pl."pid" IS NOT NULL THEN sa."usesysid" IS NULL OR has_table_privilege(sa."usesysid", %[2]s, 'UPDATE')
             ELSE COALESCE((
               SELECT bool_or(r."oid" IS NULL OR has_table_privilege(r."oid", %[2]s, 'UPDATE'))
               FROM pg_catalog.pg_prepared_xacts AS px
               LEFT JOIN pg_catalog.pg_roles AS r ON r."rolname" = px."owner"
               WHERE pl."virtualtransaction" = '-1/' || px."transaction"::text
                  OR EXISTS (SELECT 1 FROM pg_catalog.pg_locks AS pt
                             WHERE pt."locktype" = 'transactionid' AND pt."pid" IS NULL
                               AND pt."virtualtransaction" = pl."virtualtransaction" AND pt."transactionid" = px."transaction")), true) END)`, key, "'"+strings.ReplaceAll(locks, "'", "''")+"'")
}

// StorageKeySQL is DeriveKey's storage key in SQL, of the user key expr
// (text): NFC (normalize, in a UTF8 database; in another encoding the key
// is taken as given), then MakeStorageKey without a prefix: the key
// itself when it fits, else base64url of the first 16 bytes of its
// SHA-256. For SQL that takes a user key (txguard's hold function), so
// that it finds the same row as Go. vectors: tests/itest
// TestTxGuardHoldFunctionTakesTheKey.
func StorageKeySQL(expr string) string {
	n := fmt.Sprintf(`(CASE WHEN current_setting('server_encoding') = 'UTF8' THEN normalize(%[1]s, NFC) ELSE %[1]s END)`, expr)
	return fmt.Sprintf(`(CASE WHEN octet_length(%[1]s) + %[2]d <= %[3]d THEN %[1]s
  ELSE rtrim(translate(encode(substring(sha256(convert_to(%[1]s, 'UTF8')) FROM 1 FOR 16), 'base64'), '+/', '-_'), '=') END)`,
		n, StorageKeyReserve, StorageKeyLimit)
}

var callRE = regexp.MustCompile(`\{\{\s*([a-z_]+)\s*(?:\(([^()]*)\))?\s*\}\}`)

// Render expands the template calls in text. names maps the caller's own
// placeholders ({{locks}}, ...) to their text. An unknown name or a wrong
// number of arguments is an error: statement files are embedded, so a
// test renders each of them.
func Render(text string, names map[string]string) (string, error) {
	var firstErr error
	out := callRE.ReplaceAllStringFunc(text, func(m string) string {
		sub := callRE.FindStringSubmatch(m)
		name, hasArgs := sub[1], strings.Contains(m, "(")
		var args []string
		if hasArgs && strings.TrimSpace(sub[2]) != "" {
			for _, a := range strings.Split(sub[2], ",") {
				args = append(args, strings.TrimSpace(a))
			}
		}
		s, err := expand(name, args, hasArgs, names)
		if err != nil && firstErr == nil {
			firstErr = fmt.Errorf("%s: %w", m, err)
		}
		return s
	})
	if firstErr == nil && strings.Contains(out, "{{") {
		firstErr = fmt.Errorf("unexpanded template text in %q", out)
	}
	return out, firstErr
}

func expand(name string, args []string, call bool, names map[string]string) (string, error) {
	want := func(n ...int) error {
		for _, k := range n {
			if len(args) == k {
				return nil
			}
		}
		return fmt.Errorf("%s takes %v arguments, got %d", name, n, len(args))
	}
	switch name {
	case "now_ms":
		return NowMsSQL, want(0)
	case "live":
		if err := want(1, 2); err != nil {
			return "", err
		}
		now := "t.now_ms"
		if len(args) == 2 {
			now = args[1]
		}
		return LiveSQL(args[0], now), nil
	case "fence_text":
		return FenceTextSQL(strings.Join(args, ", ")), want(1)
	case "fence_max":
		return strconv.FormatInt(FenceMax, 10), want(0)
	case "cleanup_grace":
		return strconv.Itoa(CleanupGraceMs), want(0)
	case "async_release_max":
		return strconv.Itoa(AsyncReleaseMaxMs), want(0)
	case "storage_key":
		return StorageKeySQL(strings.Join(args, ", ")), want(1)
	case "gate_held_privileged":
		return GateHeldSQL(strings.Join(args, ", "), names["locks"]), want(1)
	}
	if s, ok := names[name]; ok && !call {
		return s, nil
	}
	return "", fmt.Errorf("unknown template name %q", name)
}

// QuoteIdent quotes a SQL identifier (table or index name).
func QuoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

// Variant keeps or drops the conditional blocks of a statement file: the
// lines between "--if name" and "--end" are kept when on, those between
// "--if !name" and "--end" when not; the marker lines go. Blocks of other
// names, kept whole with their markers for a later call, may nest in a
// block of name and contain one.
func Variant(text, name string, on bool) string {
	var b strings.Builder
	keep := true
	depth := 0 // nesting of other names' blocks inside this name's block
	in := false
	for _, line := range strings.SplitAfter(text, "\n") {
		t := strings.TrimSpace(line)
		switch {
		case !in && (t == "--if "+name || t == "--if !"+name):
			in, keep, depth = true, (t == "--if "+name) == on, 0
			continue
		case in && t == "--end" && depth == 0:
			in, keep = false, true
			continue
		case in && strings.HasPrefix(t, "--if "):
			depth++
		case in && t == "--end":
			depth--
		}
		if keep {
			b.WriteString(line)
		}
	}
	return b.String()
}
