package syncguard

import (
	"context"
	"errors"
	"fmt"

	"github.com/syncguard/syncguard-go/driver"
	"github.com/syncguard/syncguard-go/internal/classify"
	"github.com/syncguard/syncguard-go/internal/rules"
)

// classifier turns errors of database/sql calls into *Error, by the policy
// of internal/classify (see docs/errors.md) and a dialect's reading of the
// driver's error shapes.
type classifier struct {
	dialect driver.Dialect
	// table and fenceTable name the tables in privilege errors.
	table, fenceTable string
}

// wrap turns any error from database/sql into a *Error; a *Error in err's
// chain is returned as is, a nil err gives nil.
func (c classifier) wrap(ctx context.Context, op string, err error) *Error {
	if err == nil {
		return nil
	}
	var se *Error
	if errors.As(err, &se) {
		return se
	}
	e := fromResult(op, classify.Error(ctx, c.dialect, err))
	if e.SQLState == "42501" {
		if need := c.needs(op); need != "" {
			e.Msg += "; " + need
		}
	}
	return e
}

// needs says which privileges op needs, for a privilege error (42501).
func (c classifier) needs(op string) string {
	if c.table == "" {
		return ""
	}
	locks, fences := rules.QuoteIdent(c.table), rules.QuoteIdent(c.fenceTable)
	switch op {
	case "acquire":
		return fmt.Sprintf("acquire needs USAGE on the schema of %s and %s and SELECT, INSERT, UPDATE on both", locks, fences)
	case "release":
		return fmt.Sprintf("release needs USAGE on the schema of %s and SELECT, DELETE on it", locks)
	case "extend":
		return fmt.Sprintf("extend needs USAGE on the schema of %s and SELECT, UPDATE on it", locks)
	case "isLocked", "lookup", "list":
		return fmt.Sprintf("%s needs USAGE on the schema of %s and SELECT on it", op, locks)
	case "lastFence":
		return fmt.Sprintf("lastFence needs USAGE on the schema of %s and SELECT on it", fences)
	case "cleanup":
		return fmt.Sprintf("cleanup needs USAGE on the schema of %s and SELECT, DELETE on it", locks)
	case "setupSchema":
		return fmt.Sprintf("setupSchema needs CREATE on the schema that will hold %s and %s (the first schema of search_path), or the tables created beforehand by a role that has it", locks, fences)
	}
	return ""
}

// ctxErr returns Aborted (cancelled) or NetworkTimeout (deadline) when ctx
// is already done, before any I/O.
func ctxErr(ctx context.Context, op string) *Error {
	if r, done := classify.Context(ctx, nil); done {
		return fromResult(op, r)
	}
	return nil
}

// fromContext is the error of an operation given up because ctx is done;
// cause, if not nil, is the driver's error for the same event.
func fromContext(ctx context.Context, op string, cause error) *Error {
	r, _ := classify.Context(ctx, cause)
	return fromResult(op, r)
}

func fromResult(op string, r classify.Result) *Error {
	return &Error{Op: op, Code: Code(r.Code), SQLState: r.SQLState, Msg: r.Msg, Err: r.Err}
}
