package waiting

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Place is a queued waiter's place, the part every lock kind's waiter
// shares: its lockId (the same for all its attempts), the wake-up that a
// release's notification reaches from its first queued attempt until it
// leaves, and whether an attempt's outcome was unknown. The rows that
// hold its place in the queue are the kind's.
type Place struct {
	LockID  string
	Unknown atomic.Bool // an attempt's outcome was unknown: Leave also releases in the background

	mu     sync.Mutex
	wakeup *Wakeup
	closed bool
}

// Join registers the waiter's wake-up on channel before a queued attempt
// (the first time; never after Close), and reports whether a notification
// reaches it now: a release hands the key only to such a waiter.
func (p *Place) Join(w *Waker, channel string) bool {
	p.mu.Lock()
	if p.wakeup == nil && !p.closed {
		p.wakeup = w.Expect(channel, Payload(p.LockID))
	}
	u := p.wakeup
	p.mu.Unlock()
	return u != nil && u.ChannelListened()
}

// Listen asks for the channel of the waiter's wake-up to be listened on.
func (p *Place) Listen() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.wakeup != nil {
		p.wakeup.Listen()
	}
}

// Hint is the waiter's Hint once it has joined (zero before): its
// wake-up, its renewal, and polling while no notification reaches it.
func (p *Place) Hint(renew time.Duration) Hint {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.wakeup == nil {
		return Hint{}
	}
	return Hint{Wake: p.wakeup.C, Renew: renew, Poll: !p.wakeup.ChannelListened()}
}

// Grant is the grant notification that reached the waiter ("": none).
func (p *Place) Grant() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.wakeup == nil {
		return ""
	}
	return p.wakeup.Grant()
}

// DropGrant forgets a grant that came before t (Wakeup.DropGrant).
func (p *Place) DropGrant(t time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.wakeup != nil {
		p.wakeup.DropGrant(t)
	}
}

// Close ends the wake-up; it reports whether the waiter had joined.
func (p *Place) Close() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	if p.wakeup == nil {
		return false
	}
	p.wakeup.Close()
	p.wakeup = nil
	return true
}

// Leave takes a waiter that had joined out of its queue, by release: the
// kind's release of the waiter's lockId as a waiter leaving, which makes
// its rows a tombstone (an attempt still in flight can neither queue it
// again nor take the key) and passes on what was handed to it meanwhile.
// It reports whether it released a lock (ok) and whether the waiter's
// row was there (left). When it found neither, a hand-off may have been
// committing (its snapshot missed the lock, and the row was gone when its
// delete got to it): a second release sees that commit. When that fails,
// or an attempt's outcome was unknown and no lock was found, background
// runs (the kind's release in the background).
func (p *Place) Leave(ctx context.Context, release func(context.Context) (ok, left bool, err error), background func()) error {
	if !p.Close() {
		return nil
	}
	ok, left, err := release(ctx)
	if err == nil && !ok && !left {
		ok, _, err = release(ctx)
	}
	if err != nil || !ok && p.Unknown.Load() {
		background()
	}
	return err
}
