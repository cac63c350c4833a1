package syncguard

import (
	"context"

	"github.com/syncguard/syncguard-go/driver"
)

// WrapError turns an error from a database/sql call made for op into a
// *Error, exactly as this package's own operations do: the context is
// checked first (a cancelled ctx is Aborted, a passed deadline
// NetworkTimeout), then d's reading of the driver error and its SQLSTATE.
// A *Error in err's chain is returned as is; a nil err gives nil. d may be
// nil (only generic error shapes are recognised then).
//
// It is for packages built on syncguard that run their own SQL, such as
// github.com/syncguard/syncguard-go/advisory, so that every error a user
// sees has the same codes. Passing ctx.Err() for a done ctx gives the
// error to return before any I/O.
func WrapError(ctx context.Context, op string, d driver.Dialect, err error) *Error {
	return classifier{dialect: d}.wrap(ctx, op, err)
}
