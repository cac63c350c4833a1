// Package waiting wakes the callers of syncguard.Lock that wait for a
// contended key, and the watchers of a key: one LISTEN connection per
// Backend, opened when first needed, listening on the channels of those
// keys, and delivering each notification by its channel: to the waiter of
// that channel its payload names, and to the channel's watchers.
//
// A notification is only a hint that causes an attempt (or a read): any
// role can LISTEN and NOTIFY on any channel, so order, membership and
// expiry are rows in the lock tables (docs/design.md, "Waiting"). A forged
// notification costs at most one attempt of the waiter it names on its
// channel (a read of each watcher), coalesced while one is pending, and
// adds no state; the connection's buffer is bounded.
package waiting

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/syncguard/syncguard-go/driver"
)

// Channel is the notification channel of a key: prefix (Prefix of the lock
// table) and the first 24 hex digits of the SHA-256 of the storage key.
// ChannelSQL computes the same in a statement. Keys never appear on a
// channel: any role can LISTEN.
func Channel(prefix, storageKey string) string { return prefix + hexSum(storageKey, 12) }

// Payload is the payload that wakes the waiter whose lockId is lockID: the
// first 16 hex digits of its SHA-256, which tells nothing of the lockId.
func Payload(lockID string) string { return hexSum(lockID, 8) }

// Prefix is the channel prefix of a lock table.
func Prefix(table string) string { return "syncguard:" + hexSum(table, 4) + ":" }

// ChannelSQL is Channel in SQL, over the storage key expression expr, with
// prefix rendered as a string literal (it is hex and punctuation only).
func ChannelSQL(prefix, expr string) string {
	return fmt.Sprintf("'%s' || left(encode(sha256(convert_to(%s, 'UTF8')), 'hex'), 24)", prefix, expr)
}

// PayloadSQL is Payload in SQL, over the lockId expression expr.
func PayloadSQL(expr string) string {
	return fmt.Sprintf("left(encode(sha256(convert_to(%s, 'UTF8')), 'hex'), 16)", expr)
}

// NotifySQL sends one notification ($1 channel, $2 payload) in a
// transaction of its own: the probe, and a wake-up sent after the commit
// of the release that handed the key over (through NotifyDB). Such a
// transaction writes no WAL, so its commit waits for no flush.
const NotifySQL = "SELECT pg_notify($1::text, $2::text)"

func hexSum(s string, n int) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:n])
}

// Kind says why waiting is not woken by notifications.
type Kind int

const (
	KindNone       Kind = iota // Active, or not tried yet
	KindNoListener             // the dialect has no driver.Listener
	KindProbeLost              // LISTEN worked but the probe never came back: a pooler in transaction mode
	KindFailed                 // opening or keeping the connection failed
	KindClosed                 // Waker.Close was called
)

// Status says whether waiters are woken by notifications.
type Status struct {
	Active bool
	Kind   Kind
	Reason string // why not, when not Active
	// PoolReaches: a notification sent through the lock pool (Config.Pool)
	// reaches the connection, which is then in the lock database.
	PoolReaches bool
}

// Config is a Waker's connection to the database and its tunables. Zero
// durations mean the defaults on each field.
type Config struct {
	// Open opens a LISTEN connection listening on channel; nil when the
	// dialect has no driver.Listener (NoListener says why).
	Open       func(ctx context.Context, channel string) (driver.NotifyConn, error)
	NoListener string
	// Notify sends a notification (the probe) where Open listens.
	Notify func(ctx context.Context, channel, payload string) error
	// Pool, when Notify goes elsewhere than the lock pool, sends through
	// the lock pool: its probe, sent first, says whether a release's own
	// commit reaches the connection (Status.PoolReaches).
	Pool func(ctx context.Context, channel, payload string) error
	// OnFallback is told, once per failure, why waiting polls.
	OnFallback func(Status)

	OpenTimeout  time.Duration // Open, and each LISTEN: default 10 s
	ProbeTimeout time.Duration // the probe's delivery, once sent: default 3 s
	Ping         time.Duration // ping after this long without a notification: default 10 s
	Linger       time.Duration // keep listening on a channel after its last waiter: default 250 ms
	Idle         time.Duration // close the connection after this long without waiters: default 30 s
	RetryMin     time.Duration // reopen after a failure, doubling: default 5 s
	RetryMax     time.Duration // up to: default 5 min
}

func (c *Config) defaults() {
	for _, d := range []struct {
		v   *time.Duration
		def time.Duration
	}{{&c.OpenTimeout, 10 * time.Second}, {&c.ProbeTimeout, 3 * time.Second}, {&c.Ping, 10 * time.Second},
		{&c.Linger, 250 * time.Millisecond}, {&c.Idle, 30 * time.Second}, {&c.RetryMin, 5 * time.Second}, {&c.RetryMax, 5 * time.Minute}} {
		if *d.v <= 0 {
			*d.v = d.def
		}
	}
}

// Waker is one Backend's LISTEN connection: it wakes the Backend's
// waiters and watchers with the notifications on their keys' channels.
type Waker struct {
	cfg    Config
	probe  string // this waker's probe channel and payload
	ctx    context.Context
	cancel context.CancelFunc // Close: ends whatever the connection does

	mu       sync.Mutex
	waiters  map[string]*Wakeup  // waiters (Expect), by payload
	chans    map[string]*channel // channels wanted or listened
	st       Status
	running  bool
	closed   bool
	statusAt time.Time     // a Status call keeps the connection until Idle after it
	dropped  time.Time     // the last channel unlistened: the connection stays open, listening on nothing, until Idle after it
	retryAt  time.Time     // no reopen before
	backoff  time.Duration // the last retry delay
	retry    *time.Timer   // reopens after a failure while a channel is wanted
	kick     func()        // ends the goroutine's current Wait
	settled  chan struct{} // closed when the current opening attempt settles
	done     chan struct{} // closed when the goroutine exits
}

// channel is one key channel: who wants it, and whether it is listened on.
type channel struct {
	members  map[*Wakeup]struct{} // waiters that asked for it (Listen) and watchers (Watch)
	listened bool                 // LISTEN took effect on the current connection
	idle     time.Time            // when its last member left
}

// New returns a Waker; it opens nothing until a waiter or a watcher
// listens.
func New(cfg Config) *Waker {
	cfg.defaults()
	var b [8]byte
	rand.Read(b[:])
	ctx, cancel := context.WithCancel(context.Background())
	return &Waker{cfg: cfg, probe: "syncguard:probe:" + hex.EncodeToString(b[:]), ctx: ctx, cancel: cancel,
		waiters: map[string]*Wakeup{}, chans: map[string]*channel{}, settled: make(chan struct{})}
}

// Wakeup is one waiter's or one watcher's wake-up: C receives a value
// (coalesced) at a notification on its key's channel that is for it (a
// waiter's: naming it; a watcher's: any), never on another channel; when
// that channel starts being listened on (a hand-off may have been missed
// before); and when the connection fails.
type Wakeup struct {
	C       <-chan struct{}
	c       chan struct{}
	w       *Waker
	channel string    // its key's channel
	payload string    // a waiter's; "" for a watcher
	joined  bool      // a member of its channel: asked for it to be listened on
	grant   string    // the last grant notification's payload for it (unverified)
	grantAt time.Time // when it came
}

// Expect registers the waiter of the key channel channel whose payload is
// payload, before its first attempt: a notification for it is not missed
// once the channel is listened on (for anyone, or after its Listen). No
// I/O.
func (w *Waker) Expect(channel, payload string) *Wakeup {
	u := w.newWakeup(channel)
	u.payload = payload
	w.mu.Lock()
	w.waiters[payload] = u
	w.mu.Unlock()
	return u
}

// Watch registers a watcher of the key channel channel and asks for the
// channel to be listened on. Its Wakeup is signalled by every notification
// on that channel, whatever its payload (a hand-off's names the waiter,
// not the key; anyone can send one): a hint to read the key again, never
// what changed. Close it when done.
func (w *Waker) Watch(channel string) *Wakeup {
	u := w.newWakeup(channel)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.joinLocked(u)
	return u
}

func (w *Waker) newWakeup(channel string) *Wakeup {
	c := make(chan struct{}, 1)
	return &Wakeup{C: c, c: c, w: w, channel: channel}
}

func (u *Wakeup) signal() {
	select {
	case u.c <- struct{}{}:
	default:
	}
}

// Listen asks for the waiter's channel to be listened on, once. It
// returns at once; u is signalled when the LISTEN has taken effect (unless
// it already had).
func (u *Wakeup) Listen() {
	u.w.mu.Lock()
	defer u.w.mu.Unlock()
	if !u.joined && u.w.waiters[u.payload] == u {
		u.w.joinLocked(u)
	}
}

// joinLocked makes u a member of its channel and has the channel listened
// on.
func (w *Waker) joinLocked(u *Wakeup) {
	u.joined = true
	c := w.chans[u.channel]
	if c == nil {
		c = &channel{members: map[*Wakeup]struct{}{}}
		w.chans[u.channel] = c
	}
	c.members[u] = struct{}{}
	if !c.listened {
		w.startLocked()
		if w.kick != nil {
			w.kick() // the goroutine LISTENs before it waits again
		}
	}
}

// ChannelListened reports whether a notification on u's channel reaches u.
func (u *Wakeup) ChannelListened() bool { return u.w.ChannelListened(u.channel) }

// ChannelListened reports whether channel is listened on now (for a
// waiter or a watcher, or lingering after one), without asking for it.
func (w *Waker) ChannelListened(channel string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	c := w.chans[channel]
	return c != nil && c.listened && w.st.Active
}

// Close unregisters u.
func (u *Wakeup) Close() {
	w := u.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if u.payload != "" && w.waiters[u.payload] == u {
		delete(w.waiters, u.payload)
	}
	if c := w.chans[u.channel]; c != nil && u.joined {
		u.joined = false
		if delete(c.members, u); len(c.members) == 0 {
			c.idle = time.Now()
		}
	}
}

// PoolReaches reports whether a notification in a release's own commit
// reaches the connection (Status.PoolReaches), as its last probe found.
func (w *Waker) PoolReaches() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.st.Active && w.st.PoolReaches
}

// Wake signals the waiter named by payload, if it is this process's: a
// hand-off by this Backend, known before the notification arrives.
func (w *Waker) Wake(payload string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if u := w.waiterLocked(payload); u != nil {
		u.signal()
	}
}

// waiterLocked returns the waiter a payload names (a plain wake-up's, or a
// grant's first field), keeping a grant's payload for it.
func (w *Waker) waiterLocked(payload string) *Wakeup {
	name, _, grant := strings.Cut(payload, ":")
	u := w.waiters[name]
	if u != nil && grant {
		u.grant, u.grantAt = payload, time.Now()
	}
	return u
}

// DropGrant forgets a grant that came before t: an attempt sent at t
// that did not find the key handed to the waiter read a snapshot that
// grant's commit was in, so that lock is gone (revoked meanwhile).
func (u *Wakeup) DropGrant(t time.Time) {
	u.w.mu.Lock()
	defer u.w.mu.Unlock()
	if u.grantAt.Before(t) {
		u.grant = ""
	}
}

// Grant returns the last grant notification's payload for u and forgets
// it ("" if none): the waiter verifies it (ParseGrant).
func (u *Wakeup) Grant() string {
	u.w.mu.Lock()
	defer u.w.mu.Unlock()
	g := u.grant
	u.grant = ""
	return g
}

// deliver routes a notification by its channel: to the watchers of that
// channel, and to the waiter its payload names if that waiter waits on
// that channel. A payload naming a waiter of another channel wakes
// nobody: anyone can NOTIFY.
func (w *Waker) deliver(n driver.Notification) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if c := w.chans[n.Channel]; c != nil {
		for u := range c.members {
			if u.payload == "" {
				u.signal()
			}
		}
	}
	if name, _, _ := strings.Cut(n.Payload, ":"); w.waiters[name] != nil && w.waiters[name].channel == n.Channel {
		w.waiterLocked(n.Payload).signal()
	}
}

// Status reports whether waiters are woken by notifications. When no
// connection is open it opens one (unless a failure is recent or the
// waker is closed) and waits until the probe settles or ctx ends.
func (w *Waker) Status(ctx context.Context) Status {
	w.mu.Lock()
	w.statusAt = time.Now()
	w.startLocked()
	settled := w.settled
	w.mu.Unlock()
	select {
	case <-settled:
	case <-ctx.Done():
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	st := w.st
	if !st.Active && st.Reason == "" {
		st.Reason = "no LISTEN connection yet (waiting polls until one is confirmed)"
	}
	return st
}

// Close ends the LISTEN connection and its goroutine, and waits for them.
// Waiters in progress and later ones poll: a closed waker never opens
// again.
func (w *Waker) Close() {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return
	}
	w.closed = true
	if w.retry != nil {
		w.retry.Stop()
	}
	w.setLocked(Status{Kind: KindClosed, Reason: "Backend.Close was called: waiting polls"})
	done := w.done
	w.mu.Unlock()
	w.cancel()
	if done != nil {
		<-done
	}
}

// startLocked starts the goroutine if it is not running and may run.
func (w *Waker) startLocked() {
	if w.running || w.closed {
		return
	}
	if w.cfg.Open == nil {
		w.setLocked(Status{Kind: KindNoListener, Reason: w.cfg.NoListener})
		return
	}
	if time.Now().Before(w.retryAt) {
		return
	}
	w.running = true
	w.done = make(chan struct{})
	select {
	case <-w.settled:
		w.settled = make(chan struct{}) // for this attempt's Status callers
	default:
	}
	go w.run(w.done)
}

// setLocked records a status and, when it is settled, releases Status
// callers.
func (w *Waker) setLocked(st Status) {
	was := w.st
	w.st = st
	select {
	case <-w.settled:
	default:
		close(w.settled)
	}
	if !st.Active {
		for _, c := range w.chans {
			c.listened = false
		}
		if was.Active || was.Kind != st.Kind {
			for _, u := range w.waiters {
				u.signal() // attempt now; then poll
			}
			for _, c := range w.chans {
				for u := range c.members {
					u.signal() // watchers: read now
				}
			}
			if w.cfg.OnFallback != nil && st.Kind != KindClosed && st.Kind != KindNone {
				w.cfg.OnFallback(st) // a log record: must not call the waker
			}
		}
	}
}

// run serves one connection while anyone needs it, and records how it
// ended. After a failure it starts again at retryAt (RetryMin, doubling up
// to RetryMax): by itself if a channel is wanted then (reopen), else at
// the next Listen, Watch or Status.
func (w *Waker) run(done chan struct{}) {
	defer close(done)
	w.mu.Lock()
	wanted := w.wantedLocked(time.Now())
	w.mu.Unlock()
	st := Status{}
	if wanted {
		st = w.serve()
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.running = false
	if w.closed {
		return
	}
	w.setLocked(st)
	if st.Kind != KindNone {
		w.backoff = min(max(2*w.backoff, w.cfg.RetryMin), w.cfg.RetryMax)
		w.retryAt = time.Now().Add(w.backoff)
		w.retry = time.AfterFunc(w.backoff, w.reopen)
	}
}

// reopen starts the goroutine again after a failure's backoff if a waiter
// or a watcher wants a channel: each is signalled when it is listened on.
func (w *Waker) reopen() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, c := range w.chans {
		if len(c.members) > 0 {
			w.startLocked()
			return
		}
	}
}

// wantedLocked: someone needs the connection.
func (w *Waker) wantedLocked(now time.Time) bool {
	if now.Sub(w.statusAt) < w.cfg.Idle || now.Sub(w.dropped) < w.cfg.Idle {
		return true
	}
	for _, c := range w.chans {
		if len(c.members) > 0 || now.Sub(c.idle) < w.cfg.Idle {
			return true
		}
	}
	return false
}

// Wiring is where a Backend's (or a lock kind's) waiting listens and
// sends: NewFor builds its Waker.
type Wiring struct {
	DB       *sql.DB        // the lock pool
	NotifyDB *sql.DB        // Config.NotifyDB: listen there when set (its own dialect, found from its driver)
	Dialect  driver.Dialect // the lock pool's
	// Notify sends the probe where the connection listens; Pool, when
	// Notify does not go through the lock pool, sends through it (Config.Pool).
	Notify, Pool func(ctx context.Context, channel, payload string) error
	Logger       *slog.Logger
	What         string // what waits, in the fallback warning ("syncguard", "syncguard semaphore")
	Tunables     Config // the durations (zero: the defaults)
}

// NewFor returns the Waker of w: listening through the dialect's
// driver.Listener, polling (with a warning that says why) without one.
func NewFor(w Wiring) *Waker {
	cfg := w.Tunables
	cfg.Notify, cfg.Pool = w.Notify, w.Pool
	db, dialect := w.DB, w.Dialect
	if w.NotifyDB != nil {
		db = w.NotifyDB
		if d, ok := driver.Lookup(db.Driver()); ok {
			dialect = d
		}
	}
	if l, ok := dialect.(driver.Listener); ok {
		cfg.Open = func(ctx context.Context, channel string) (driver.NotifyConn, error) {
			return l.Listen(ctx, db, channel)
		}
	} else {
		cfg.NoListener = "the dialect has no driver.Listener (lib/pq: open the pool with sql.OpenDB(pq.NewConnector(dsn)) of the syncguard pq adapter, or set Config.Dialect to pq.ListenDialect(dsn))"
	}
	cfg.OnFallback = func(st Status) {
		w.Logger.Warn(w.What+": waiting falls back to polling: a waiter finds the key handed to it at its next attempt instead of at once (the order of waiters is kept)",
			slog.String("reason", st.Reason))
	}
	return New(cfg)
}
