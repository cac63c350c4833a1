// Package kit is what the lock kinds built on package syncguard
// (semaphore, rwlock, multilock and their fakes in syncguardtest) share
// for waiting.
package kit

import (
	"context"
	"time"

	"github.com/syncguard/syncguard-go/internal/waiting"
	"github.com/syncguard/syncguard-go/syncguard"
)

// Pace is a waiter's schedule of attempts (waiting.Pace), told of each
// attempt's outcome by Attempt.
type Pace struct{ waiting.Pace }

// Attempt runs one attempt and records its outcome.
func (p *Pace) Attempt(attempt func() (syncguard.AcquireResult, error)) (syncguard.AcquireResult, error) {
	sent := time.Now()
	res, err := attempt()
	p.Attempted(sent, err == nil, err == nil && res.OK, res.RetryIn)
	return res, err
}

// Flight is a kind's waiter's schedule, with its attempts detached from
// the wait's end (waiting.Detach): an attempt still running when the wait
// ends finishes in the background, and Leave undoes it.
type Flight struct {
	Pace
	later <-chan outcome
}

type outcome struct {
	res syncguard.AcquireResult
	err error
}

// Attempt runs attempt on a context detached from ctx's end, ending at
// most grace after it. When ctx ends first it returns wrap(ctx.Err()), the
// kind's error for a done ctx, and keeps the attempt for Leave.
func (f *Flight) Attempt(ctx context.Context, grace time.Duration, wrap func(error) error, attempt func(context.Context) (syncguard.AcquireResult, error)) (syncguard.AcquireResult, error) {
	if ctx.Err() != nil {
		return syncguard.AcquireResult{}, wrap(ctx.Err())
	}
	sent := time.Now()
	o, later, ok := waiting.Detach(ctx, grace, func(actx context.Context) outcome {
		res, err := attempt(actx)
		return outcome{res, err}
	})
	if !ok {
		f.later = later
		return syncguard.AcquireResult{}, wrap(ctx.Err())
	}
	f.Attempted(sent, o.err == nil, o.err == nil && o.res.OK, o.res.RetryIn)
	return o.res, o.err
}

// Leave is the waiter's Leave: leave now (which makes its queue row a
// tombstone: an attempt still running cannot queue it again nor take the
// key after that, and one that took it before is released by leave), and,
// with an attempt left running, release a lock it reports when it answers
// (with a context of grace).
func (f *Flight) Leave(ctx context.Context, grace time.Duration, release func(ctx context.Context, lockID string) error, leave func(context.Context) error) error {
	err := leave(ctx)
	if later := f.later; later != nil {
		f.later = nil
		go func() {
			if o := <-later; o.err == nil && o.res.OK {
				ctx, cancel := context.WithTimeout(context.Background(), grace)
				defer cancel()
				_ = release(ctx, o.res.LockID)
			}
		}()
	}
	return err
}
