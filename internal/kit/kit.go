// Package kit is what the lock kinds built on package syncguard
// (semaphore, rwlock, multilock and their fakes in syncguardtest) share
// for waiting.
package kit

import (
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
