// Package stmtfunc wraps a statement in a PL/pgSQL function ("Planning" in
// docs/design.md). A statement sent unprepared (behind a transaction-mode
// pooler, or in a transaction that cannot run a prepared statement) is
// parsed and planned at every execution: 1.5 ms of server time for a
// release, more than its execution. The same statement run by a PL/pgSQL
// function (RETURN QUERY) is planned once per server session and function,
// generically from its first call (the function sets plan_cache_mode =
// force_generic_plan for its own run: a prepared statement is planned with
// its values at its first five executions, each plan dearer than the
// execution), and a call of the function costs little to plan. A
// function's name ends with a hash of its text, so a version whose
// statement differs calls a function of its own. The functions run with
// the caller's privileges (SECURITY INVOKER): any role may call them and
// gains nothing by it.
package stmtfunc

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/syncguard/syncguard-go/internal/rules"
)

// Func is one statement's function.
type Func struct {
	Name string // unquoted: prefix + "_op_" + 8 hex digits
	Args string // its parameter types, "text,bigint", as to_regprocedure reads them
	DDL  string // DO ... CREATE FUNCTION ... when missing; (one line ends with ";")
	Call string // the call, with the statement's parameters ($1::text, ...)
}

// paramRE finds a statement's parameters, every use cast to a one-word
// type ($1::text); anyParamRE finds every use, and badCastRE a cast to a
// type paramRE would misread (text[], varchar(10), double precision).
var paramRE, anyParamRE, badCastRE = regexp.MustCompile(`\$(\d+)::([a-z]+)`), regexp.MustCompile(`\$\d+`), regexp.MustCompile(`\$\d+::[a-z]+(\[|\(| precision| varying| with)`)

// New makes the function of body, a statement without comments whose
// parameters are all cast where used, named after prefix (at most 51
// bytes: the name stays within PostgreSQL's 63); returns lists the types
// of its columns ("text, bigint").
func New(prefix, returns, body string) (Func, error) {
	return NewLocked(prefix, returns, "", body)
}

// NewLocked is New for a body that takes its row locks NOWAIT, with
// lock (a SELECT, or "") the same locks taken waiting. The function runs
// body once; only when body finds a row locked by another transaction
// (55P03: that run is undone) does it run lock, as a PERFORM, waiting for
// the rows, and then body again with a snapshot of its own, taken once
// lock has them (read committed: each statement of a function sees what
// committed before it began), so that body sees the rows it locked as they
// are. lock's parameters are body's.
func NewLocked(prefix, returns, lock, body string) (Func, error) {
	pre := ""
	if lock != "" {
		rest, ok := strings.CutPrefix(lock, "SELECT ")
		if !ok {
			return Func{}, fmt.Errorf("the lock statement of a statement function is a SELECT")
		}
		pre = "PERFORM " + rest + "; "
		body = lock + "\n" + body // parameters and characters checked together
	}
	var types []string
	for _, m := range paramRE.FindAllStringSubmatch(body, -1) {
		n, _ := strconv.Atoi(m[1])
		for len(types) < n {
			types = append(types, "")
		}
		if t := types[n-1]; t != "" && t != m[2] {
			return Func{}, fmt.Errorf("$%d is cast to %s and %s", n, t, m[2])
		}
		types[n-1] = m[2]
	}
	if len(anyParamRE.FindAllString(body, -1)) != len(paramRE.FindAllString(body, -1)) || badCastRE.MatchString(body) {
		return Func{}, fmt.Errorf("every use of a parameter must be cast to a one-word type")
	}
	if strings.Contains(body, "$syncguard$") || strings.Contains(body, "$do$") || strings.Contains(body, ";") || strings.Contains(body, "--") || strings.Contains(body, "%") {
		return Func{}, fmt.Errorf("the body of a statement function has no ';', '--', '%%', $syncguard$ or $do$")
	}
	var params, cols []string
	for i, t := range types {
		if t == "" {
			return Func{}, fmt.Errorf("$%d is not used", i+1)
		}
		params = append(params, fmt.Sprintf("$%d::%s", i+1, t))
	}
	for i, t := range strings.Split(returns, ", ") {
		cols = append(cols, fmt.Sprintf("r%d %s", i+1, t))
	}
	args := strings.Join(types, ",")
	// Created only when missing (CREATE OR REPLACE needs the owner's role,
	// and a migration role may apply SchemaSQL after the application's ran
	// SetupSchema): the name, a hash of the whole definition, says what it
	// is. One line ends with ";": deploy.SplitStatements splits there.
	run := "RETURN QUERY\n" + body + "; END"
	if lock != "" {
		body = strings.TrimPrefix(body, lock+"\n")
		run = "BEGIN RETURN QUERY\n" + body + "; RETURN; EXCEPTION WHEN lock_not_available THEN NULL; END; " + pre + "RETURN QUERY\n" + body + "; END"
	}
	def := fmt.Sprintf("CREATE FUNCTION %%s(%s) RETURNS TABLE (%s) LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $syncguard$\n#variable_conflict use_column\nBEGIN\n%s\n$syncguard$",
		strings.Join(types, ", "), strings.Join(cols, ", "), run)
	sum := sha256.Sum256([]byte(def))
	name := prefix + "_op_" + hex.EncodeToString(sum[:4])
	q := rules.QuoteIdent(name)
	sig := q + "(" + args + ")"
	return Func{
		Name: name,
		Args: args,
		DDL: fmt.Sprintf("DO $do$ BEGIN IF to_regprocedure(quote_ident(current_schema()) || '.' || '%s') IS NULL THEN %s; END IF; EXCEPTION WHEN duplicate_function THEN NULL; END $do$;\n",
			sig, fmt.Sprintf(def, q)),
		Call: "SELECT * FROM " + q + "(" + strings.Join(params, ", ") + ")",
	}, nil
}

// DDL is the functions' part of a schema.
func DDL(fs []Func) string {
	var b strings.Builder
	b.WriteString("\n-- Statement functions: the statements below, each planned once per\n" +
		"-- server session, without values, whether the call is prepared or sent\n" +
		"-- unprepared (behind a transaction-mode pooler). Named by a hash of their definition, each is\n" +
		"-- created when missing (any role with CREATE may apply this again).\n")
	for _, f := range fs {
		b.WriteString("\n" + f.DDL)
	}
	return b.String()
}

// Sig is the function's signature, as to_regprocedure reads it.
func (f Func) Sig() string { return rules.QuoteIdent(f.Name) + "(" + f.Args + ")" }

// Exist is a condition that the functions exist in the current schema.
func Exist(fs []Func) string {
	var conds []string
	for _, f := range fs {
		conds = append(conds, fmt.Sprintf("to_regprocedure(quote_ident(current_schema()) || '.' || '%s') IS NOT NULL", f.Sig()))
	}
	return strings.Join(conds, " AND ")
}

// Missing reports whether sqlState and msg, the error of a call of a
// function named after prefix, say that the function cannot serve: it is
// missing (42883: a version's functions not yet created) or not granted
// (42501: EXECUTE revoked from PUBLIC), naming it; or the statement's
// columns do not match its result (42804: a lock table whose columns are
// of other types than the schema's, which the statement itself reads).
func Missing(prefix, sqlState, msg string) bool {
	if sqlState == "42804" {
		return true
	}
	return (sqlState == "42883" || sqlState == "42501") &&
		regexp.MustCompile(`(^|[^A-Za-z0-9_])`+regexp.QuoteMeta(prefix)+`_op_[0-9a-f]{8}([^A-Za-z0-9_]|$)`).MatchString(msg)
}
