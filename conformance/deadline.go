package conformance

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// caseContext is a case's context. It ends at the case's deadline: the
// case timeout (a bound for the reference machine) × the run's slowdown.
// When the slowdown was measured (not fixed by SlowdownEnv or
// Harness.Slowdown), the machine is measured again when the deadline
// comes, and a machine slower by then pushes the deadline back, up to
// maxSlowdown × the timeout: a load that arrived after the run started is
// not reported as a hang.
//
// It carries no value of the context package, so a context derived from
// it (context.WithTimeout(e.ctx, …), or a driver's) ends with it, by a
// goroutine, with its error, context.DeadlineExceeded, and reads the
// deadline as it stands. It carries the run's pace (paceOf).
type caseContext struct {
	timeout time.Duration
	p       *pace
	start   time.Time
	done    chan struct{}

	mu       sync.Mutex
	factor   float64 // the slowdown the deadline stands at
	deadline time.Time
	err      error
	timer    *time.Timer
	// at is what the machine measured when the first deadline came, if
	// it was measured again.
	at *measurement
}

func newCaseContext(timeout time.Duration, p *pace) *caseContext {
	c := &caseContext{timeout: timeout, p: p, start: time.Now(), done: make(chan struct{}), factor: p.deadline}
	c.deadline = c.start.Add(stretch(timeout, c.factor))
	c.timer = time.AfterFunc(time.Until(c.deadline), c.fire)
	return c
}

func stretch(d time.Duration, f float64) time.Duration { return time.Duration(float64(d) * f) }

// fire runs at the deadline: it ends the context, unless the machine now
// measures slower than the deadline allows for.
func (c *caseContext) fire() {
	var m measurement
	measured := c.p.source == "measured"
	if measured {
		m = c.p.remeasure()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return
	}
	if measured {
		if c.at == nil {
			c.at = &m
		}
		if f := m.factor(); f > c.factor {
			if d := c.start.Add(stretch(c.timeout, f)); time.Until(d) > 50*time.Millisecond {
				c.factor, c.deadline = f, d
				c.timer.Reset(time.Until(d))
				return
			}
		}
	}
	c.err = context.DeadlineExceeded
	close(c.done)
}

// stop ends the context (context.Canceled) if it has not ended.
func (c *caseContext) stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.timer.Stop()
	if c.err == nil {
		c.err = context.Canceled
		close(c.done)
	}
}

func (c *caseContext) Deadline() (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.deadline, true
}

func (c *caseContext) Done() <-chan struct{} { return c.done }

func (c *caseContext) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

func (c *caseContext) Value(key any) any {
	if key == (paceKey{}) {
		return c.p
	}
	return nil
}

// budget says what the case's deadline was made of, for a failure.
func (c *caseContext) budget() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return fmt.Sprintf("Harness.CaseTimeout %v × slowdown %.1f = %v", c.timeout, c.factor, c.deadline.Sub(c.start).Round(time.Millisecond))
}

// overrun says, for a case that ran out of time, how long it ran, how slow
// the machine was and what that suggests.
func (c *caseContext) overrun(name string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := fmt.Sprintf("%s ran %v, past its budget of %v, and its context expired. How slow the machine was: %s",
		name, time.Since(c.start).Round(time.Millisecond), c.deadline.Sub(c.start).Round(time.Millisecond), c.p)
	if c.at != nil {
		s += fmt.Sprintf("; measured again at the deadline: %s (slowdown %.1f)", *c.at, c.at.factor())
	}
	start := measurement{roundTrip: c.p.roundTrip, cpu: c.p.cpu}.factor()
	switch {
	case c.p.source != "measured" && start > c.factor*1.2:
		return s + fmt.Sprintf(". The machine measured slower (slowdown %.1f) than the run was told (%.1f): set %s higher, or unset it (and Harness.Slowdown) to have the suite measure", start, c.factor, SlowdownEnv)
	case c.p.source == "measured" && c.factor >= maxSlowdown:
		return s + fmt.Sprintf(". That is as slow as a measured run allows for (×%d): on a machine this busy set %s higher (or Harness.Slowdown); if the case fails the same way on a quiet machine, a lock operation or a wait hangs", maxSlowdown, SlowdownEnv)
	}
	return s + fmt.Sprintf(". The budget allowed for that slowdown, so a lock operation or a wait probably hangs; if the machine was busier than that, set %s (or Harness.Slowdown) higher", SlowdownEnv)
}
