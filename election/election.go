// Package election elects one leader among processes with a syncguard
// lock, and gives every term a fence: the term number, strictly increasing
// across leaders of one election, so that a deposed leader's late writes
// can be rejected by the resource they go to.
//
// An Election is a lock key. Campaign waits in the key's queue of waiters
// until this process holds the lock (AutoExtend keeps it), and returns a
// Term; Run campaigns, runs the leader's work with the term's context,
// resigns when the work returns and campaigns again, until its context
// ends. A term's context is cancelled before the lock can expire when the
// lease cannot extend it (the AutoExtend guarantee), and at once on
// Resign. Resign releases the lock: on a *syncguard.Backend the release
// hands the key, in its own commit, to the first queued candidate, which
// is woken at once. A crashed leader's lock expires after its TTL, and the
// first queued candidate takes it then.
//
// Leader and Observe tell who leads (identity, term, since when) without
// campaigning. Several elections are several keys.
//
// See docs/election.md for the guarantees, what clock skew does, and a
// comparison with etcd's concurrency.Election, client-go's leaderelection
// and river's elector.
package election

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/syncguard/syncguard-go/syncguard"
)

// Defaults of Options.
const (
	DefaultTTL          = 15 * time.Second
	DefaultPollInterval = time.Second
	DefaultRecampaign   = time.Second
)

// resignTimeout bounds the release of Resign.
const resignTimeout = 5 * time.Second

// Options configure an Election. The zero value (or nil) means the
// defaults documented on each field.
type Options struct {
	// Identity names this candidate: stored as the lock's holder identity,
	// it is what Leader and Observe report. Default
	// syncguard.DefaultIdentity() ("host:pid").
	Identity string
	// TTL is the leader's lock TTL, extended automatically by a third of it.
	// A crashed leader is replaced at most TTL (plus the spec's 1 s
	// tolerance) after its last extend. Default 15 s.
	TTL time.Duration
	// PollInterval is how often Observe reads the leader at least. On a
	// *syncguard.Backend woken by notifications it also reads when a
	// release hands the election over (a hint from Backend.WatchKey).
	// Default 1 s.
	PollInterval time.Duration
	// Recampaign is how long Run waits before campaigning again after the
	// leader's work returned nil (not after a loss: then it campaigns at
	// once). It keeps work that returns at once from taking the lock in a
	// loop; queued candidates get the key at the resignation meanwhile.
	// Default 1 s.
	Recampaign time.Duration
	// OnStatus, when set, is told this candidate's Status: when each
	// campaign starts, when a term of its own begins and ends, and when it
	// sees a newer term (while it campaigns, Campaign observes the election
	// as Observe does: one lookup every PollInterval). Calls are serialized
	// and the Status may repeat the last one; OnStatus must return quickly
	// and not call the Election. otelsyncguard.ElectionMetrics.OnStatus
	// reports it as metrics. Default: nil (no observing).
	OnStatus func(Status)
}

// Election is one election: a lock key on a backend. It is safe for
// concurrent use; one process usually campaigns once at a time.
type Election struct {
	b   syncguard.LockBackend
	key string
	o   Options
	st  status
}

// New returns the election of key on b (a *syncguard.Backend, a wrapper
// around one, or syncguardtest's fake). opts may be nil.
// It does no I/O.
func New(b syncguard.LockBackend, key string, opts *Options) (*Election, error) {
	if b == nil {
		return nil, &syncguard.Error{Op: "election", Code: syncguard.ErrInvalidArgument, Msg: "backend must not be nil"}
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Identity == "" {
		o.Identity = syncguard.DefaultIdentity()
	}
	for _, d := range []struct {
		v   *time.Duration
		def time.Duration
	}{{&o.TTL, DefaultTTL}, {&o.PollInterval, DefaultPollInterval}, {&o.Recampaign, DefaultRecampaign}} {
		if *d.v < 0 {
			return nil, &syncguard.Error{Op: "election", Code: syncguard.ErrInvalidArgument, Msg: fmt.Sprintf("negative duration %v", *d.v)}
		}
		if *d.v == 0 {
			*d.v = d.def
		}
	}
	return &Election{b: b, key: key, o: o}, nil
}

// Key returns the election's lock key.
func (e *Election) Key() string { return e.key }

// Identity returns this candidate's identity.
func (e *Election) Identity() string { return e.o.Identity }

// Term is one leadership of this process. Its lock is extended
// automatically until the term ends: on Resign, when the lock is lost, or
// when the context given to Campaign ends.
type Term struct {
	lease  *syncguard.Lease
	since  time.Time
	ctx    context.Context
	cancel context.CancelCauseFunc
	once   sync.Once
	err    error
}

// ErrResigned is the cause of a term's context after Resign.
var ErrResigned = errors.New("election: resigned")

// Campaign waits until this candidate is elected, and returns its term, or
// an error when ctx ends first (ErrAborted, or ErrAcquisitionTimeout for
// ctx's deadline) or the backend fails for good (an outage is ridden out).
// The term lasts at most as long as ctx: pass a context that lives as long
// as the leadership may.
func (e *Election) Campaign(ctx context.Context) (*Term, error) {
	opts := &syncguard.LockOptions{
		TTL: e.o.TTL, AutoExtend: true, Identity: e.o.Identity,
		Acquisition: syncguard.AcquisitionOptions{Timeout: -1}, // no end but ctx's
	}
	unobserve := e.campaigning(ctx)
	defer unobserve()
	lease, err := syncguard.Lock(ctx, e.b, e.key, opts)
	if err != nil {
		return nil, err
	}
	t := &Term{lease: lease, since: time.Now()}
	lctx, cancel := lease.Bind(context.WithoutCancel(ctx))
	t.ctx, t.cancel = context.WithCancelCause(lctx)
	context.AfterFunc(t.ctx, cancel)
	// The campaign's ctx ends the term: resign then.
	stop := context.AfterFunc(ctx, func() { _ = t.Resign(context.Background()) })
	context.AfterFunc(t.ctx, func() { stop() })
	e.elected(t)
	return t, nil
}

// Fence returns the term: the lease's fence, strictly greater than every
// earlier term's of this election (and than every fence of its key). Pass
// it with every write the leader makes, and let the resource refuse a
// write whose term is below the last one it accepted.
func (t *Term) Fence() syncguard.Fence { return t.lease.Fence() }

// Since returns the local time the term began.
func (t *Term) Since() time.Time { return t.since }

// Lease returns the term's lease (for its HeldUntil and ExpiresAt). Do not
// release it; Resign does.
func (t *Term) Lease() *syncguard.Lease { return t.lease }

// Context returns the term's context: cancelled when the term ends, on
// Resign (cause ErrResigned) or before the lock's expiry when leadership
// is lost (a cause for which errors.Is(cause, syncguard.ErrLockLost)), or
// when the campaign's context ends.
func (t *Term) Context() context.Context { return t.ctx }

// Done is closed when the term ends (see Context).
func (t *Term) Done() <-chan struct{} { return t.ctx.Done() }

// Err returns nil during the term, then why it ended (see Context).
func (t *Term) Err() error {
	if t.ctx.Err() == nil {
		return nil
	}
	return context.Cause(t.ctx)
}

// Resign ends the term: it cancels the term's context, then releases the
// lock, which hands the election to the first queued candidate at once.
// The release ends with ctx, and after 5 s at most (the lock then expires
// after its TTL). Only the first call does anything; every call returns
// the release's error.
func (t *Term) Resign(ctx context.Context) error {
	t.once.Do(func() {
		t.cancel(ErrResigned)
		if t.lease.Err() == nil {
			rctx, cancel := context.WithTimeout(ctx, resignTimeout)
			defer cancel()
			_, t.err = t.lease.Release(rctx)
		}
	})
	return t.err
}

// Run campaigns, runs fn with the term's context once elected, resigns
// when fn returns, and campaigns again, until ctx ends; it then resigns
// and returns nil. After a loss it campaigns again at once; after fn
// returned nil, after Options.Recampaign. When fn returns an error while
// its term still held, Run resigns and returns that error. Any other
// error of the campaign is returned.
func (e *Election) Run(ctx context.Context, fn func(ctx context.Context, term *Term) error) error {
	for {
		t, err := e.Campaign(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		ferr := fn(t.Context(), t)
		lost := t.Err() != nil && !errors.Is(t.Err(), ErrResigned)
		_ = t.Resign(context.WithoutCancel(ctx))
		switch {
		case ctx.Err() != nil:
			return nil
		case ferr != nil && !lost:
			return ferr
		case !lost:
			select {
			case <-time.After(e.o.Recampaign):
			case <-ctx.Done():
				return nil
			}
		}
	}
}

// Leader is the leader of an election as a lookup saw it.
type Leader struct {
	Identity  string          // the leader's Options.Identity ("" for a holder that stored none)
	Term      syncguard.Fence // its term (the lock's fence)
	Since     time.Time       // when its term began, by the server's clock
	ExpiresAt time.Time       // its lock's expiry, by the server's clock
}

// Leader returns the current leader, or nil when there is none. Like every
// lookup it describes an instant that has passed when it returns.
func (e *Election) Leader(ctx context.Context) (*Leader, error) {
	info, err := e.b.LookupKey(ctx, e.key)
	if err != nil || info == nil {
		return nil, err
	}
	return &Leader{Identity: info.Identity, Term: info.Fence, Since: info.AcquiredAt, ExpiresAt: info.ExpiresAt}, nil
}

// Observe reports the leader now and every change after, nil for "no
// leader", until ctx ends; then it closes the channel. It does not
// campaign. It is a plain loop: read the leader, then wait for a hint on
// the election's key or for Options.PollInterval, and read again. On a
// Backend woken by notifications (Backend.WatchKey) a hint comes when a
// release hands the election to a queued candidate, when the key's
// channel starts being listened on and when the LISTEN connection fails,
// and only from the key's own channel; hints that come during a read
// count as one. It reports a change of term (or of leader to none). A term
// that began and ended between two reads is not seen, and the terms it
// reports are strictly increasing. A failed read is skipped. The channel
// is unbuffered: a reader that falls behind delays the next read, never
// skips a change it was going to be told.
func (e *Election) Observe(ctx context.Context) <-chan *Leader {
	ch := make(chan *Leader)
	hint := watchKey(ctx, e.b, e.key) // nil without WatchKey: polling only
	go func() {
		defer close(ch)
		var last *Leader
		var read time.Time
		first := true
		for {
			read = time.Now()
			if l, err := e.Leader(ctx); err == nil && (first || changed(last, l)) {
				select {
				case ch <- l:
					first, last = false, l
				case <-ctx.Done():
					return
				}
			}
			poll := time.NewTimer(e.o.PollInterval)
			select {
			case <-poll.C:
			case <-hint:
				// Anyone can notify on the key's channel: hints cause at
				// most one read per minHintGap.
				poll.Reset(time.Until(read.Add(minHintGap)))
				select {
				case <-poll.C:
				case <-ctx.Done():
				}
			case <-ctx.Done():
			}
			poll.Stop()
			if ctx.Err() != nil {
				return
			}
		}
	}()
	return ch
}

// minHintGap bounds the reads that notifications cause in Observe (a
// flood of forged ones included) to 100 a second per observer.
const minHintGap = 10 * time.Millisecond

// watchKey returns b's WatchKey channel of key, looking through wrappers
// (Unwrap), or nil when b has none.
func watchKey(ctx context.Context, b syncguard.LockBackend, key string) <-chan struct{} {
	w, ok := syncguard.As[interface {
		WatchKey(context.Context, string) (<-chan struct{}, error)
	}](b)
	if !ok {
		return nil
	}
	c, _ := w.WatchKey(ctx, key) // an invalid key: every read reports it
	return c
}

func changed(a, b *Leader) bool {
	if a == nil || b == nil {
		return a != b
	}
	return a.Term != b.Term
}
