package syncguard

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/syncguard/syncguard-go/driver"
	"github.com/syncguard/syncguard-go/internal/rules"
	"github.com/syncguard/syncguard-go/internal/waiting"
)

// The Backend's side of waiting for a contended key (docs/design.md,
// "Waiting"): the queue is rows of the waiters table, written by the
// waiter's attempts (acquire.sql's queue lines) and handed the key by the
// release (release.sql's); internal/waiting only wakes the waiter that a
// release names.

const defaultWaitWindow = 3 * time.Second

// NotificationStatus says whether waiting on a Backend is woken by
// notifications. See Backend.NotificationStatus.
type NotificationStatus struct {
	// Active is true while the Backend's LISTEN connection is open and its
	// probe came back: a waiter of this process is woken the moment a
	// release anywhere hands it the key.
	Active bool
	// Reason says why not, when Active is false.
	Reason string
	kind   waiting.Kind
}

// NotificationStatus reports whether Lock and WithLock on b are woken the
// moment a release hands them the key, or find out at their next attempt
// (polling), and why. It opens the Backend's LISTEN connection if none is
// open and waits, at most until ctx is done, for its probe notification to
// come back; syncguard doctor uses it. The order of waiters does not depend
// on it: the queue is in the tables.
func (b *Backend) NotificationStatus(ctx context.Context) NotificationStatus {
	st := b.shared.hub.Status(ctx)
	return NotificationStatus{Active: st.Active, Reason: st.Reason, kind: st.Kind}
}

// WatchKey returns a channel that receives a value (coalesced) when the
// lock of key may have changed hands, until ctx ends: at a release's
// hand-off notification (or any other this Backend's LISTEN connection
// receives: anyone can send one) and once the key's channel is listened
// on; it keeps that connection open meanwhile. A hint to read the key
// again, never what changed: a release to no waiter, a takeover at expiry
// or a Backend without notifications sends nothing, so poll as well.
// election's Observe uses it.
func (b *Backend) WatchKey(ctx context.Context, key string) (<-chan struct{}, error) {
	k, err := checkKey("watch", key)
	if err != nil {
		return nil, err
	}
	s := b.shared.hub.Watch(waiting.Channel(waiting.Prefix(b.shared.cfg.table), k.Storage))
	context.AfterFunc(ctx, s.Close)
	return s.C, nil
}

// Close closes what the Backend opened itself: the LISTEN connection that
// wakes waiting Lock and WithLock calls, if one is open, and its goroutine,
// and waits for them. It does not close the *sql.DB. The Backend stays
// usable, but waits in progress and later ones poll (they still keep
// their order: the queue is in the tables). Without Close the connection
// closes itself 30 s after the last wait.
func (b *Backend) Close() error {
	b.shared.hub.Close()
	return nil
}

// newHub makes the Backend's LISTEN connection manager.
func newHub(s *shared) *waiting.Hub {
	cfg := s.waitCfg.hub
	if l, ok := s.cfg.dialect.(driver.Listener); ok {
		cfg.Open = func(ctx context.Context, channel string) (driver.NotifyConn, error) {
			return l.Listen(ctx, s.db, channel)
		}
	} else {
		cfg.NoListener = "the dialect has no driver.Listener (lib/pq: open the pool with sql.OpenDB(pq.NewConnector(dsn)) of the syncguard pq adapter, or set Config.Dialect to pq.ListenDialect(dsn))"
	}
	cfg.Notify = func(ctx context.Context, channel, payload string) error {
		return (&Backend{shared: s}).oneShot(ctx, "SELECT pg_notify($1::text, $2::text)", []any{channel, payload}, nil)
	}
	cfg.OnFallback = func(st waiting.Status) {
		s.cfg.logger.Warn("syncguard: waiting falls back to polling: a waiter finds the key handed to it at its next attempt instead of at once (the order of waiters is kept)",
			slog.String("reason", st.Reason))
	}
	return waiting.New(cfg)
}

// waitRecord is the one record that Lock and WithLock pass, in the context
// of each of their attempts, through any Locker that passes ctx on, to the
// *Backend beneath. The Backend uses it only for an attempt on Lock's own
// key (a wrapper may lock another) on its pool: it then runs the waiter's
// attempt (stmtAcquireWait) under the record's lockId, so that the waiter
// keeps one place in the queue and a release can hand it the key, and
// fills in what Lock waits on.
type waitRecord struct {
	storage  string      // Lock's key, as stored
	lockID   string      // the waiter's lockId, for all its attempts
	identity string      // LockOptions.Identity, or ""
	single   bool        // no waiting: only the identity is passed on
	unknown  atomic.Bool // an attempt's outcome was unknown: withdraw also releases in the background

	mu       sync.Mutex
	hub      *waiting.Hub
	sub      *waiting.Sub  // the Backend's wake-up for this waiter
	channel  string        // the key's notification channel
	withdraw func()        // takes the waiter out of the queue
	window   time.Duration // the Backend's queue window
	retryIn  time.Duration // a failed attempt: until the holder's lock is no longer live, by the server's clock
	age      time.Duration // a successful attempt: how long the lock existed when the attempt's statement started
}

type waitKey struct{}

func recordOf(ctx context.Context) *waitRecord {
	r, _ := ctx.Value(waitKey{}).(*waitRecord)
	return r
}

// waitRecordFor returns a record for Lock's key, or nil when the key is
// invalid (the first attempt reports it).
func waitRecordFor(key, identity string, single bool) *waitRecord {
	k, err := checkKey("lock", key)
	if err != nil {
		return nil
	}
	return &waitRecord{storage: k.Storage, lockID: rules.GenerateLockID(), identity: identity, single: single}
}

// join registers the waiter with s, once, before its first queued
// attempt; withdraw takes it out of the queue when it gives up.
func (r *waitRecord) join(s *shared, withdraw func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.sub != nil {
		return
	}
	r.hub, r.sub = s.hub, s.hub.Expect(waiting.Payload(r.lockID))
	r.channel = waiting.Channel(waiting.Prefix(s.cfg.table), r.storage)
	r.window = s.waitCfg.window
	r.withdraw = withdraw
}

// notified reports whether a notification reaches the waiter now: its
// key's channel is listened on (before its first attempt asked for it: by
// another waiter, or lingering). A release hands the key only to such a
// waiter.
func (r *waitRecord) notified() bool {
	r.mu.Lock()
	hub, ch := r.hub, r.channel
	r.mu.Unlock()
	return hub != nil && hub.Listened(ch)
}

// contended records what a failed queued attempt learned, and asks for
// the key's channel.
func (r *waitRecord) contended(retryIn time.Duration) {
	r.mu.Lock()
	r.retryIn = retryIn
	sub, ch := r.sub, r.channel
	r.mu.Unlock()
	if sub != nil {
		sub.Listen(ch)
	}
}

// state returns what Lock waits on: the wake-up channel (nil: none), the
// renewal interval (0: not queued), the holder's remaining life, and
// whether the waiter must poll for a free key itself: no notification
// reaches it, so no release hands it the key, and it cannot know when the
// waiters before it are gone but by looking.
func (r *waitRecord) state() (wake <-chan struct{}, renew, retryIn time.Duration, poll bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.sub != nil {
		wake, renew = r.sub.C, r.window/3
		poll = !r.sub.Listening()
	}
	retryIn, r.retryIn = r.retryIn, 0
	return wake, renew, retryIn, poll
}

// wakeC is the waiter's wake-up channel, or nil.
func (r *waitRecord) wakeC() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.sub == nil {
		return nil
	}
	return r.sub.C
}

// end closes the waiter's wake-up and, unless it got the key, takes it
// out of the queue: at once, or in the background while the server is
// unreachable (the wait ended in an outage), so that Lock returns at its
// Timeout.
func (r *waitRecord) end(acquired, outage bool) {
	r.mu.Lock()
	sub, withdraw := r.sub, r.withdraw
	r.mu.Unlock()
	if sub == nil {
		return
	}
	sub.Close()
	switch {
	case acquired:
	case outage:
		go withdraw()
	default:
		withdraw()
	}
}

// grantAge is how long the lock existed when the successful attempt's
// statement started (a key handed over by a release), for the lease's
// clock.
func (r *waitRecord) grantAge() time.Duration {
	if r == nil {
		return 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.age
}

// queueLost and holdersLost report whether err says that the waiters (or
// holders) table is missing or not granted to this role (a schema set up
// before the table existed, or by the reference implementation). The
// Backend then goes on without it, warning once: without the waiters
// table it hands no key over and waits polling, without the holders table
// it stores and shows no identities.
func (s *shared) queueLost(err error) bool {
	return s.tableLost(err, waitersTable(s.cfg.table), &s.noQueue, &s.queueWarned, "waiting polls and keeps no order")
}

func (s *shared) holdersLost(err error) bool {
	return s.tableLost(err, holdersTable(s.cfg.table), &s.noHolders, &s.holdWarned, "no holder identity is stored or shown")
}

func (s *shared) tableLost(err error, table string, lost, warned *atomic.Bool, until string) bool {
	st := s.sqlState(err)
	if (st != "42P01" && st != "42501") || !strings.Contains(err.Error(), table) {
		return false
	}
	lost.Store(true)
	if !warned.Swap(true) {
		s.cfg.logger.Warn("syncguard: the "+strings.TrimPrefix(table, s.cfg.table+"_")+" table is missing or not granted: run SetupSchema (or apply SchemaSQL) and grant it like the lock table; until then "+until,
			slog.String("table", table), slog.String("sqlstate", st))
	}
	return true
}
