package waiting

import (
	"context"
	"time"
)

// Detach runs attempt on a context that keeps ctx's values but not its
// end, so that ctx's end never cuts the attempt's statement: a cut
// statement costs pgx's stdlib driver its connection, and callers that
// give up within milliseconds then leave the pool opening connections
// (authentication included) that no later attempt can wait for. The
// attempt ends at the latest grace after ctx's deadline (without one,
// grace after ctx is done). When its outcome comes before ctx is done,
// Detach returns it (ok); otherwise later receives it when it comes, and
// the caller undoes it.
func Detach[T any](ctx context.Context, grace time.Duration, attempt func(context.Context) T) (r T, later <-chan T, ok bool) {
	if ctx.Done() == nil {
		return attempt(ctx), nil, true
	}
	actx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	if dl, has := ctx.Deadline(); has {
		actx, cancel = context.WithDeadline(context.WithoutCancel(ctx), dl.Add(grace))
	}
	done := make(chan T, 1)
	go func() {
		defer cancel()
		done <- attempt(actx)
	}()
	select {
	case r = <-done:
		return r, nil, true
	case <-ctx.Done():
	}
	if _, has := ctx.Deadline(); !has {
		time.AfterFunc(grace, cancel)
	}
	return r, done, false
}
