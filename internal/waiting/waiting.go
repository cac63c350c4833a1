// Package waiting wakes the callers of syncguard.Lock that wait for a
// contended key: one LISTEN connection per Backend, opened when a caller
// first has to wait, listening on the channels of the keys its callers wait
// for (and watch), and delivering each notification by its channel: to the
// one waiter of that channel that its payload names, and to the watchers of
// that channel.
//
// A notification is only ever a hint that causes an attempt (or a read).
// Any role that can connect can LISTEN and NOTIFY on any channel, so
// nothing here decides order, membership or expiry: the queue and the
// hand-off are rows in the lock tables (see "Waiting" in docs/design.md).
// What a forger can do is bounded: a notification on a channel nobody here
// waits on or watches, or whose payload names no waiter of its channel,
// costs two map lookups; one that does costs that waiter one attempt (a
// watcher one read), coalesced while one is pending; no notification adds
// state beyond a few channel names per waiter of this process that it
// names; and the connection's buffer is bounded (driver adapters drop
// beyond it).
package waiting

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"sort"
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
	KindClosed                 // Hub.Close was called
)

// Status says whether waiters are woken by notifications.
type Status struct {
	Active bool
	Kind   Kind
	Reason string // why not, when not Active
}

// Config is a Hub's connection to the database and its tunables. Zero
// durations mean the defaults on each field.
type Config struct {
	// Open opens a LISTEN connection listening on channel; nil when the
	// dialect has no driver.Listener (NoListener says why).
	Open       func(ctx context.Context, channel string) (driver.NotifyConn, error)
	NoListener string
	// Notify sends a notification through the pool (the probe).
	Notify func(ctx context.Context, channel, payload string) error
	// OnFallback is told, once per failure, why waiting polls.
	OnFallback func(Status)

	OpenTimeout  time.Duration // Open, and each LISTEN: default 10 s
	ProbeTimeout time.Duration // the probe's round trip: default 3 s
	Ping         time.Duration // ping after this long without a notification: default 10 s
	Linger       time.Duration // keep listening on a channel after its last waiter: default 10 s
	Idle         time.Duration // close the connection after this long without waiters: default 30 s
	RetryMin     time.Duration // reopen after a failure, doubling: default 5 s
	RetryMax     time.Duration // up to: default 5 min
}

func (c *Config) defaults() {
	for _, d := range []struct {
		v   *time.Duration
		def time.Duration
	}{{&c.OpenTimeout, 10 * time.Second}, {&c.ProbeTimeout, 3 * time.Second}, {&c.Ping, 10 * time.Second},
		{&c.Linger, 10 * time.Second}, {&c.Idle, 30 * time.Second}, {&c.RetryMin, 5 * time.Second}, {&c.RetryMax, 5 * time.Minute}} {
		if *d.v <= 0 {
			*d.v = d.def
		}
	}
}

// Hub is one Backend's LISTEN connection and its waiters.
type Hub struct {
	cfg    Config
	probe  string // this hub's probe channel and payload
	ctx    context.Context
	cancel context.CancelFunc // Close: ends whatever the connection does

	mu       sync.Mutex
	subs     map[string]*Sub     // waiters (Expect), by payload
	chans    map[string]*channel // channels wanted or listened
	st       Status
	running  bool
	closed   bool
	statusAt time.Time     // a Status call keeps the connection until Idle after it
	retryAt  time.Time     // no reopen before
	backoff  time.Duration // the last retry delay
	retry    *time.Timer   // reopens after a failure while a channel is wanted
	kick     func()        // ends the goroutine's current Wait
	settled  chan struct{} // closed when the current opening attempt settles
	done     chan struct{} // closed when the goroutine exits
}

// channel is one key channel: who wants it, and whether it is listened on.
type channel struct {
	members  map[*Sub]struct{} // waiters that asked for it (Listen) and watchers (Watch)
	listened bool              // LISTEN took effect on the current connection
	idle     time.Time         // when its last member left
}

// New returns a Hub; it opens nothing until a waiter listens.
func New(cfg Config) *Hub {
	cfg.defaults()
	var b [8]byte
	rand.Read(b[:])
	ctx, cancel := context.WithCancel(context.Background())
	return &Hub{cfg: cfg, probe: "syncguard:probe:" + hex.EncodeToString(b[:]), ctx: ctx, cancel: cancel,
		subs: map[string]*Sub{}, chans: map[string]*channel{}, settled: make(chan struct{})}
}

// Sub is one waiter's or one watcher's wake-up: C receives a value
// (coalesced) when a notification on its key's channel is for it (for a
// waiter, one whose payload names it; for a watcher, any), when its
// channel starts being listened on (a hand-off may have been missed
// before), and when the connection fails.
type Sub struct {
	C       <-chan struct{}
	c       chan struct{}
	h       *Hub
	payload string // a waiter's; "" for a watcher
	channel string // its key's channel, once known
	// early: a waiter's, before it names its channel (Listen): the
	// channels of notifications that named it meanwhile (a hand-off may
	// come between its first attempt and its Listen), at most maxEarly;
	// earlyMore: more came.
	early     []string
	earlyMore bool
}

// maxEarly bounds Sub.early: a waiter's payload is known to nobody before
// a hand-off names it, so a longer list means forged notifications, and
// costs the waiter one attempt at its Listen.
const maxEarly = 4

// Expect registers the waiter whose payload is payload, before its first
// attempt, so that no notification for it on its key's channel is missed
// once that channel is listened on (Listen names the channel; one that
// came before is kept for it, by channel). No I/O.
func (h *Hub) Expect(payload string) *Sub {
	s := newSub(h)
	s.payload = payload
	h.mu.Lock()
	h.subs[payload] = s
	h.mu.Unlock()
	return s
}

// Watch registers a watcher of the key channel name and asks for the
// channel to be listened on: its Sub is signalled as a waiter's is (when
// the channel starts being listened on, when the connection fails) and on
// every notification on that channel, whatever its payload names (a
// hand-off's payload names the waiter, not the key; anyone can send one),
// never by another channel's. A hint to read the key again, never what
// changed. Close it when done.
func (h *Hub) Watch(name string) *Sub {
	s := newSub(h)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.joinLocked(s, name)
	return s
}

func newSub(h *Hub) *Sub {
	c := make(chan struct{}, 1)
	return &Sub{C: c, c: c, h: h}
}

func (s *Sub) signal() {
	select {
	case s.c <- struct{}{}:
	default:
	}
}

// Listen names s's key channel, once, and asks for it to be listened on.
// It returns at once; s is signalled when the LISTEN has taken effect
// (unless it already had), and now if a notification on name named s
// before (kept since Expect).
func (s *Sub) Listen(name string) {
	h := s.h
	h.mu.Lock()
	defer h.mu.Unlock()
	if s.channel != "" || h.subs[s.payload] != s {
		return
	}
	if s.earlyMore || slices.Contains(s.early, name) {
		s.signal()
	}
	s.early, s.earlyMore = nil, false
	h.joinLocked(s, name)
}

// joinLocked makes s a member of the channel name and has the channel
// listened on.
func (h *Hub) joinLocked(s *Sub, name string) {
	s.channel = name
	c := h.chans[name]
	if c == nil {
		c = &channel{members: map[*Sub]struct{}{}}
		h.chans[name] = c
	}
	c.members[s] = struct{}{}
	if !c.listened {
		h.startLocked()
		if h.kick != nil {
			h.kick() // the goroutine LISTENs before it waits again
		}
	}
}

// Listening reports whether s's channel is listened on now.
func (s *Sub) Listening() bool {
	s.h.mu.Lock()
	defer s.h.mu.Unlock()
	return s.h.listenedLocked(s.channel)
}

// Listened reports whether channel is listened on now (for another
// waiter, or lingering after one), without asking for it.
func (h *Hub) Listened(channel string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.listenedLocked(channel)
}

func (h *Hub) listenedLocked(channel string) bool {
	c := h.chans[channel]
	return c != nil && c.listened && h.st.Active
}

// Close unregisters s.
func (s *Sub) Close() {
	h := s.h
	h.mu.Lock()
	defer h.mu.Unlock()
	if s.payload != "" && h.subs[s.payload] == s {
		delete(h.subs, s.payload)
	}
	if c := h.chans[s.channel]; c != nil {
		if _, ok := c.members[s]; ok {
			delete(c.members, s)
			if len(c.members) == 0 {
				c.idle = time.Now()
			}
		}
	}
	s.early = nil
}

// Wake signals the waiter named by payload, if it is this process's: a
// hand-off by this Backend, known before the notification arrives.
func (h *Hub) Wake(payload string) {
	h.mu.Lock()
	s := h.subs[payload]
	h.mu.Unlock()
	if s != nil {
		s.signal()
	}
}

// deliver routes a notification by its channel: to the watchers of that
// channel, and to the waiter its payload names if that waiter waits on
// that channel (or has not named its channel yet: kept for its Listen). A
// payload naming a waiter of another channel wakes nobody: anyone can
// NOTIFY.
func (h *Hub) deliver(n driver.Notification) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if c := h.chans[n.Channel]; c != nil {
		for s := range c.members {
			if s.payload == "" {
				s.signal()
			}
		}
	}
	s := h.subs[n.Payload]
	switch {
	case s == nil:
	case s.channel == n.Channel:
		s.signal()
	case s.channel != "":
	case slices.Contains(s.early, n.Channel):
	case len(s.early) < maxEarly:
		s.early = append(s.early, n.Channel)
	default:
		s.earlyMore = true
	}
}

// Status reports whether waiters are woken by notifications. When no
// connection is open it opens one (unless a failure is recent or the hub
// is closed) and waits until the probe settles or ctx ends.
func (h *Hub) Status(ctx context.Context) Status {
	h.mu.Lock()
	h.statusAt = time.Now()
	h.startLocked()
	settled := h.settled
	h.mu.Unlock()
	select {
	case <-settled:
	case <-ctx.Done():
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	st := h.st
	if !st.Active && st.Reason == "" {
		st.Reason = "no LISTEN connection yet (waiting polls until one is confirmed)"
	}
	return st
}

// Close ends the LISTEN connection and its goroutine, and waits for them.
// Waiters in progress and later ones poll: a closed hub never opens again.
func (h *Hub) Close() {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return
	}
	h.closed = true
	if h.retry != nil {
		h.retry.Stop()
	}
	h.setLocked(Status{Kind: KindClosed, Reason: "Backend.Close was called: waiting polls"})
	done := h.done
	h.mu.Unlock()
	h.cancel()
	if done != nil {
		<-done
	}
}

// startLocked starts the goroutine if it is not running and may run.
func (h *Hub) startLocked() {
	if h.running || h.closed {
		return
	}
	if h.cfg.Open == nil {
		h.setLocked(Status{Kind: KindNoListener, Reason: h.cfg.NoListener})
		return
	}
	if time.Now().Before(h.retryAt) {
		return
	}
	h.running = true
	h.done = make(chan struct{})
	select {
	case <-h.settled:
		h.settled = make(chan struct{}) // for this attempt's Status callers
	default:
	}
	go h.run(h.done)
}

// setLocked records a status and, when it is settled, releases Status
// callers.
func (h *Hub) setLocked(st Status) {
	was := h.st
	h.st = st
	select {
	case <-h.settled:
	default:
		close(h.settled)
	}
	if !st.Active {
		for _, c := range h.chans {
			c.listened = false
		}
		if was.Active || was.Kind != st.Kind {
			for _, s := range h.subs {
				s.signal() // attempt now; then poll
			}
			for _, c := range h.chans {
				for s := range c.members {
					s.signal() // watchers: read now
				}
			}
			if h.cfg.OnFallback != nil && st.Kind != KindClosed && st.Kind != KindNone {
				h.cfg.OnFallback(st) // a log record: must not call the hub
			}
		}
	}
}

// run serves one connection while anyone needs it, and records how it
// ended. After a failure it starts again at retryAt (RetryMin, doubling up
// to RetryMax) if a channel is still wanted then, or at the first Listen,
// Watch or Status after it.
func (h *Hub) run(done chan struct{}) {
	defer close(done)
	h.mu.Lock()
	wanted := h.wantedLocked(time.Now())
	h.mu.Unlock()
	st := Status{}
	if wanted {
		st = h.serve()
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.running = false
	if h.closed {
		return
	}
	h.setLocked(st)
	if st.Kind != KindNone {
		h.backoff = min(max(2*h.backoff, h.cfg.RetryMin), h.cfg.RetryMax)
		h.retryAt = time.Now().Add(h.backoff)
		if h.retry != nil {
			h.retry.Stop()
		}
		h.retry = time.AfterFunc(h.backoff, h.reopen)
	}
}

// reopen starts the goroutine again after a failure's backoff, if a
// waiter or a watcher still wants a channel: they are not left polling
// for good, and each is signalled when its channel is listened on again.
func (h *Hub) reopen() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range h.chans {
		if len(c.members) > 0 {
			h.startLocked()
			return
		}
	}
}

// wantedLocked: someone needs the connection.
func (h *Hub) wantedLocked(now time.Time) bool {
	if now.Sub(h.statusAt) < h.cfg.Idle {
		return true
	}
	for _, c := range h.chans {
		if len(c.members) > 0 || now.Sub(c.idle) < h.cfg.Idle {
			return true
		}
	}
	return false
}

// serve opens, probes and serves one connection until it fails or is no
// longer wanted; it returns the status to record (KindNone: closed idle).
func (h *Hub) serve() Status {
	failed := func(what string, err error) Status {
		return Status{Kind: KindFailed, Reason: what + ": " + err.Error()}
	}
	ctx, cancel := context.WithTimeout(h.ctx, h.cfg.OpenTimeout)
	conn, err := h.cfg.Open(ctx, h.probe)
	cancel()
	if err != nil {
		return failed("opening the LISTEN connection", err)
	}
	defer conn.Close()
	ctx, cancel = context.WithTimeout(h.ctx, h.cfg.ProbeTimeout)
	err = h.cfg.Notify(ctx, h.probe, h.probe)
	for err == nil {
		// Only the probe channel is listened on yet: anything else on it
		// is someone else's.
		var n driver.Notification
		if n, err = conn.Wait(ctx); err == nil && n == (driver.Notification{Channel: h.probe, Payload: h.probe}) {
			break
		}
	}
	timedOut := ctx.Err() != nil
	cancel()
	if err != nil {
		if h.ctx.Err() != nil {
			return Status{Kind: KindClosed}
		}
		if timedOut {
			return Status{Kind: KindProbeLost, Reason: fmt.Sprintf("the LISTEN connection's probe notification did not come back within %v: a pooler in transaction mode does not forward notifications", h.cfg.ProbeTimeout)}
		}
		return failed("probing the LISTEN connection", err)
	}
	h.mu.Lock()
	h.backoff = 0
	h.setLocked(Status{Active: true})
	h.mu.Unlock()
	last := time.Now() // the last sign of life
	for {
		now := time.Now()
		h.mu.Lock()
		if h.closed {
			h.mu.Unlock()
			return Status{Kind: KindClosed}
		}
		if !h.wantedLocked(now) {
			h.mu.Unlock()
			return Status{}
		}
		stmts, names := h.commandsLocked(now)
		h.mu.Unlock()
		// One statement per Exec: lib/pq's ListenerConn takes a second
		// CommandComplete in one simple query for a protocol error and
		// closes the connection.
		for _, stmt := range stmts {
			ctx, cancel := context.WithTimeout(h.ctx, h.cfg.OpenTimeout)
			err := conn.Exec(ctx, stmt)
			cancel()
			if err != nil {
				return failed("LISTEN", err)
			}
			last = time.Now()
		}
		if len(names) > 0 {
			h.listened(names)
		}
		wait := h.cfg.Ping - time.Since(last)
		if wait <= 0 {
			ctx, cancel := context.WithTimeout(h.ctx, h.cfg.ProbeTimeout)
			err := conn.Ping(ctx)
			cancel()
			if err != nil {
				return failed("pinging the LISTEN connection", err)
			}
			last = time.Now()
			continue
		}
		ctx, cancel := context.WithTimeout(h.ctx, min(wait, h.cfg.Linger))
		h.mu.Lock()
		h.kick = cancel
		h.mu.Unlock()
		n, err := conn.Wait(ctx)
		ended := ctx.Err() != nil // a timeout or a kick, not a failure
		h.mu.Lock()
		h.kick = nil
		h.mu.Unlock()
		cancel()
		switch {
		case err == nil:
			last = time.Now()
			h.deliver(n)
		case h.ctx.Err() != nil:
			return Status{Kind: KindClosed}
		case !ended:
			return failed("waiting for notifications", err)
		}
	}
}

// commandsLocked returns the LISTEN and UNLISTEN statements the wanted
// channels need, and the channels they LISTEN on.
func (h *Hub) commandsLocked(now time.Time) ([]string, []string) {
	var stmts, names []string
	for name, c := range h.chans {
		switch {
		case len(c.members) > 0 && !c.listened:
			stmts = append(stmts, "LISTEN "+quote(name))
			names = append(names, name)
		case len(c.members) == 0 && now.Sub(c.idle) >= h.cfg.Linger:
			if c.listened {
				stmts = append(stmts, "UNLISTEN "+quote(name))
			}
			delete(h.chans, name)
		}
	}
	sort.Strings(stmts)
	return stmts, names
}

// listened marks names as listened on and signals their waiters and
// watchers.
func (h *Hub) listened(names []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, n := range names {
		if c := h.chans[n]; c != nil {
			c.listened = true
			for s := range c.members {
				s.signal()
			}
		}
	}
}

func quote(name string) string { return `"` + strings.ReplaceAll(name, `"`, `""`) + `"` }
