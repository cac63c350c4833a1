package syncguard

import (
	"context"
	"errors"

	"github.com/syncguard/syncguard-go/driver"
	"github.com/syncguard/syncguard-go/internal/classify"
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
	if need := classify.Needs(op, c.table, c.fenceTable); e.SQLState == "42501" && need != "" {
		e.Msg += "; " + need
	}
	return e
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
