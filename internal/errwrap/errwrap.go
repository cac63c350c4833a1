// Package errwrap lets the packages built on syncguard (advisory, the CLI)
// report errors of their own SQL exactly as package syncguard reports its
// own: a *syncguard.Error whose Code comes from internal/classify.
package errwrap

import (
	"context"
	"errors"

	"github.com/syncguard/syncguard-go/driver"
	"github.com/syncguard/syncguard-go/internal/classify"
	"github.com/syncguard/syncguard-go/syncguard"
)

// Wrap turns err, from a database/sql call made for op with ctx, into a
// *syncguard.Error: the context is checked first (a cancelled ctx is
// Aborted, a passed deadline NetworkTimeout), then d's reading of the
// driver error (d may be nil). A *syncguard.Error in err's chain is
// returned as is; a nil err gives nil. Passing ctx.Err() for a done ctx
// gives the error to return before any I/O.
func Wrap(ctx context.Context, op string, d driver.Dialect, err error) *syncguard.Error {
	if err == nil {
		return nil
	}
	var se *syncguard.Error
	if errors.As(err, &se) {
		return se
	}
	r := classify.Error(ctx, d, err)
	return &syncguard.Error{Op: op, Code: syncguard.Code(r.Code), SQLState: r.SQLState, Msg: r.Msg, Err: r.Err}
}
