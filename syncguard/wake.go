package syncguard

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/syncguard/syncguard-go/driver"
	"github.com/syncguard/syncguard-go/internal/rules"
)

// Waiting for a contended key (Lock, WithLock) is driven by a hub, one per
// Backend (shared by its WithTx views). See "Waiting" in docs/design.md.
//
// # Signals
//
// The statements announce, with pg_notify on the lock table's channel
// (wakeChannel), every change that can end a wait, and waiters announce
// themselves; a notification is delivered to every listener, in commit
// order, when its transaction commits:
//
//	r <kh>                  a lock row was deleted (release, cleanup)
//	x <kh> <expires>        an extend shortened the lock
//	q <kh> <wid> <ms> <pos> waiter wid queues for the key, for at most ms, at pos
//	a <kh> <wid> <expires>  queued waiter wid acquired the key (sent by its acquire)
//	c <kh> <wid>            queued waiter wid gave up
//	p <token>               a hub's probe of its own LISTEN connection
//	s <token>               a hub just started listening: the others announce their queued waiters again
//
// kh is wakeKeyHash of the storage key (16 hex digits of its SHA-256: keys
// never appear on the channel, which any role can LISTEN to); wid is a
// random waiter id; pos is the waiter's place in the queue: the server's
// clock (microseconds) when its first q was sent, filled in by the
// statement that sends it, and carried unchanged by every q of the waiter
// after that.
//
// # The queue
//
// Every hub keeps the same queue per key: the queued waiters of all
// processes, ordered by the pos of their q (then by arrival), which every
// hub reads from the same payload. A hub that starts listening misses the
// q sent before; so once its LISTEN connection is confirmed it asks (s),
// and every other hub sends the q of each of its queued waiters again,
// with the same pos. When the key may be free (a release, a shortened
// extend, the holder's expiry as learned from a failed attempt or an a, a
// release by this process, the LISTEN connection (re)starting), an
// "episode" hands out turns: the first waiter of the queue attempts at
// once, and, should no a come, the next one after grantStagger, and so on
// (a waiter that never takes its turn, because its process died, is
// dropped after missLimit episodes); waiters of this process not yet in the
// queue come last. The episode ends when someone acquires (an a, or a
// waiter here) or an attempt finds the key held. A caller that finds the
// key's queue non-empty queues without trying first. Without a working
// LISTEN connection nobody queues: releases by this process still wake its
// first waiter at once, and the holder's expiry and the retries of
// AcquisitionOptions find every other release.

// wakeChannel returns the notification channel of a lock table.
func wakeChannel(table string) string { return "syncguard:" + table }

// wakeChannelSQL is the channel as a SQL string literal (table names are
// plain identifiers, so nothing needs escaping).
func wakeChannelSQL(table string) string { return "'" + wakeChannel(table) + "'" }

var (
	wakeHashRE = regexp.MustCompile(`\{\{wake_hash\(([^()]*)\)\}\}`)
	waitIDRE   = regexp.MustCompile(`\{\{wait_id\(([^()]*)\)\}\}`)
)

// renderWake expands the waiting fragments of a statement file:
// {{wake_hash(expr)}} is wakeKeyHash in SQL, over the storage key expr;
// {{wait_id(kh)}} is waitID in SQL, over a key hash kh. ({{channel}} and
// {{wait_class}} are plain names.)
func renderWake(text string) string {
	text = wakeHashRE.ReplaceAllString(text, "left(encode(sha256(convert_to($1, 'UTF8')), 'hex'), 16)")
	return waitIDRE.ReplaceAllString(text, "('x' || left($1, 8))::bit(32)::int")
}

// waitClass is the first key of the advisory locks by which the LISTEN
// connections of waiting processes register their keys (two-int4 form;
// syncguard's own per-key lock is the one-bigint form): derived from the
// lock table's name.
func waitClass(table string) int32 {
	sum := sha256.Sum256([]byte("syncguard-wait:" + table))
	return int32(binary.BigEndian.Uint32(sum[:4]))
}

// waitID is the second key of a key hash's registration: its first 32 bits.
func waitID(kh string) int32 {
	b, _ := hex.DecodeString(kh[:8])
	return int32(binary.BigEndian.Uint32(b))
}

// wakeKeyHash is the key hash carried by notifications.
func wakeKeyHash(storageKey string) string {
	sum := sha256.Sum256([]byte(storageKey))
	return hex.EncodeToString(sum[:8])
}

// Tunables of the hub. Variables, so that tests can shorten them.
var (
	// grantStagger is how long a queued waiter has to take its turn before
	// the next one gets one too.
	grantStagger = 20 * time.Millisecond
	// missLimit: a queued waiter of another process that let this many
	// turns pass is taken for dead and dropped from the queue.
	missLimit = 3
)

// NotificationStatus says whether waiting on a Backend is woken by
// notifications. See Backend.NotificationStatus.
type NotificationStatus struct {
	// Active is true while the Backend's LISTEN connection is open and its
	// probe came back: a release anywhere wakes this Backend's waiters at
	// once, and its waiters queue with those of every other process.
	Active bool
	// Reason says why not, when Active is false: no waiter has waited yet,
	// the dialect lacks the capability, or the last attempt's error.
	Reason string
}

type hub struct {
	db             *sql.DB
	table          string
	logger         *slog.Logger
	cl             classifier
	releaseTimeout time.Duration
	token          string          // marks this hub's own releases (r) and sync request (s)
	lst            driver.Listener // nil: the dialect cannot listen
	// send sends a notification on the channel; with stamp, the server's
	// clock in microseconds is appended to the payload (tests replace it).
	send func(ctx context.Context, payload string, stamp bool)
	// exec runs one of the hub's statements on the pool, unprepared as the
	// Backend runs its one-shot statements (a pgx statement cache would
	// prepare it, which a transaction-mode pooler cannot route).
	exec   func(ctx context.Context, query string, args ...any) error
	skewMs atomic.Int64 // server clock minus local clock, ms, as last seen
	logged bool         // the fallback was logged (once per hub)

	mu     sync.Mutex
	keys   map[string]*keyq
	nwait  int    // waiters (and status checks) registered
	seq    uint64 // free events seen, all keys
	recent [64]freeEvent
	// the LISTEN connection (below)
	state     int
	reason    string    // why state is lnOff, for status and the log
	retryAt   time.Time // no new LISTEN connection before this
	retryWait time.Duration
	idleSince time.Time
	settled   chan struct{} // closed when state leaves lnStarting/lnProbing
	// stopListener ends the running listener goroutine, which closes
	// listenerDone when it has exited.
	stopListener context.CancelFunc
	listenerDone chan struct{}
	// kick ends the listener's current Wait, so that it registers keys
	// (syncRegistrations) at once; nil while it does not wait.
	kick  context.CancelFunc
	class int32 // waitClass of the table
	// resending: a goroutine answers sync requests (resendLocked);
	// resendAgain: another came meanwhile.
	resending, resendAgain bool
}

type freeEvent struct {
	kh  string
	seq uint64
}

// keyq is the waiting state of one key hash: this process's waiters, and
// the queue of all processes' as announced.
type keyq struct {
	kh      string
	waiters []*waiter // this process's, in arrival order
	queue   []*entry  // announced waiters of all processes, by (pos, arrival)
	seq     uint64    // free events seen for this key
	// known: the current holder took the key through Lock here, or
	// announced it (a), so its release or expiry wakes the waiters: they
	// need not poll. False after every free event.
	known bool
	// gone: waiters of this process that left (with or without the key)
	// while notifications of theirs were still to come back (their q, and
	// their a or c): those are not news, and their q must not queue a
	// waiter that is no longer there. Deleted at the a or c.
	gone map[string]bool
	// left: the waiters (of any process) whose a or c came last, newest
	// last: a q of theirs that comes after (an answer to a sync request
	// that crossed their acquire) queues nobody.
	left []string
	// reg: whether this process's LISTEN connection holds the key's
	// registration (a shared advisory lock on (class, waitID(kh))), without
	// which releases of the key notify nobody. Kept for regLinger after the
	// last local waiter left (regIdle).
	reg     int
	regBusy bool // a registration met a release in progress; retried soon
	regIdle time.Time
	expiry  *time.Timer
	expAt   time.Time
	// the current episode: turns go, in candidate order, to those that
	// have not had one in it (turnEp != ep), so that a waiter inserted
	// into the queue during the episode neither shifts a turn onto one
	// that had it nor is passed over.
	ep      uint64 // its number; 0: none yet
	epLast  string // wid of the latest turn's waiter
	epTimer *time.Timer
	epOpen  bool
}

// leftMax bounds keyq.left.
const leftMax = 32

// entry is one announced waiter in a key's queue.
type entry struct {
	wid      string
	w        *waiter // nil: another process's
	pos      int64   // its place: the server clock (µs) at its first q
	deadline time.Time
	misses   int
	turnEp   uint64 // the last episode that gave it a turn
}

type waiter struct {
	kq        *keyq
	wid       string
	turn      chan struct{} // capacity 1: attempt now
	nudge     chan struct{} // capacity 1: the LISTEN connection is confirmed; queue
	announced bool          // its q was sent
	queued    bool          // its q came back: it is in kq.queue
	pos       int64         // its place, from its first q that came back; 0: none yet
	deadline  time.Time     // when it gives up (set when it announces itself)
	turnEp    uint64        // the last episode that gave it a turn
}

// newHub returns the hub of a Backend on db with configuration cfg.
func newHub(db *sql.DB, cfg resolved, cl classifier) *hub {
	h := &hub{db: db, table: cfg.table, logger: cfg.logger, cl: cl, releaseTimeout: cfg.releaseTimeout,
		keys: map[string]*keyq{}, retryWait: listenRetryMin, token: randToken(), class: waitClass(cfg.table)}
	h.send = h.sendPool
	h.exec = func(ctx context.Context, query string, args ...any) error {
		_, err := db.ExecContext(ctx, query, args...)
		return err
	}
	h.lst, _ = cfg.dialect.(driver.Listener)
	if h.lst == nil {
		h.reason = "the dialect " + strconv.Quote(cfg.dialect.Name()) + " cannot LISTEN (it does not implement driver.Listener)"
		if cfg.dialect.Name() == "lib/pq" {
			// lib/pq opens a LISTEN connection from a DSN, which its
			// plain dialect does not know.
			h.reason += "; use Config.Dialect: pq.ListenDialect(dsn) to be woken on release"
		}
	} else {
		h.reason = "no waiter has waited yet"
	}
	return h
}

// Bounds on what notifications can make a hub remember: any role can
// NOTIFY on the channel. Far above any real use: a waiter's q lasts at most
// its Timeout.
const (
	maxQueuedMs = int64(24 * time.Hour / time.Millisecond) // a q's timeout
	maxKeys     = 10000                                    // keys known
	maxQueue    = 1000                                     // queued waiters per key
)

// isHex reports whether s is n lowercase hex digits (a key hash or an id).
func isHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

func randToken() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func (h *hub) keyLocked(kh string) *keyq {
	kq := h.keys[kh]
	if kq == nil {
		kq = &keyq{kh: kh}
		h.keys[kh] = kq
	}
	return kq
}

// dropIfIdleLocked forgets a key nobody waits for.
func (h *hub) dropIfIdleLocked(kq *keyq) {
	if len(kq.waiters) == 0 && kq.regIdle.IsZero() {
		kq.regIdle = time.Now()
	}
	if len(kq.waiters) > 0 || len(kq.queue) > 0 || kq.reg != regNone {
		return
	}
	if kq.expiry != nil {
		kq.expiry.Stop()
	}
	if kq.epTimer != nil {
		kq.epTimer.Stop()
	}
	delete(h.keys, kq.kh)
}

// seqNow returns the count of free events so far; join compares it with
// the events recorded since.
func (h *hub) seqNow() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.seq
}

// busy reports whether the key is being handed on (an episode is open:
// it was released, and waiters are taking their turns): a new caller then
// queues behind them instead of trying first, and gets its turn in the
// episode. At any other time the caller tries first: the key is held (the
// attempt fails and the caller queues), or it is free without an episode
// (a release no notification announced), and the caller takes it.
func (h *hub) busy(kh string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	kq := h.keys[kh]
	return kq != nil && kq.epOpen && len(h.candidatesLocked(kq)) > 0
}

// join registers a waiter for kh. since is seqNow() from before the
// caller's last attempt: a free event of kh after it gives the waiters
// their turns at once (the release raced the attempt). retryIn, when > 0,
// is how long until the holder's lock, as that attempt saw it, can be
// taken.
func (h *hub) join(kh string, since uint64, retryIn time.Duration) *waiter {
	h.mu.Lock()
	defer h.mu.Unlock()
	kq := h.keyLocked(kh)
	w := &waiter{kq: kq, wid: randToken(), turn: make(chan struct{}, 1), nudge: make(chan struct{}, 1)}
	kq.waiters = append(kq.waiters, w)
	kq.regIdle = time.Time{}
	h.nwait++
	h.ensureListenerLocked()
	if kq.reg == regNone && h.state == lnOn && h.kick != nil {
		h.kick() // register the key
	}
	if h.missedLocked(kh, since) {
		h.episodeLocked(kq)
	}
	if retryIn > 0 {
		h.expiresInLocked(kq, retryIn)
	}
	return w
}

// missedLocked reports whether a free event of kh may have come after since.
func (h *hub) missedLocked(kh string, since uint64) bool {
	if h.seq == since {
		return false
	}
	if h.seq-since > uint64(len(h.recent)) {
		return true // older than what we remember: assume so
	}
	for _, e := range h.recent {
		if e.seq > since && e.kh == kh {
			return true
		}
	}
	return false
}

// leave unregisters w. acquired: it holds the key now. A waiter that gives
// up while queued tells the others (c), in the background.
func (h *hub) leave(w *waiter, acquired bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	kq := w.kq
	if i := slices.Index(kq.waiters, w); i >= 0 {
		kq.waiters = slices.Delete(kq.waiters, i, i+1)
	}
	if found, _ := h.unqueueLocked(kq, w.wid); w.announced && h.state == lnOn && (found || !w.queued) {
		// Its a or c (and, if not queued yet, its q) will still come.
		if kq.gone == nil {
			kq.gone = map[string]bool{}
		}
		kq.gone[w.wid] = true
	}
	h.nwait--
	if h.nwait == 0 {
		h.idleSince = time.Now()
	}
	if acquired {
		h.endEpisodeLocked(kq)
	} else {
		if w.announced {
			go h.announce("c " + kq.kh + " " + w.wid)
		}
		// An unused turn goes to the next candidate.
		select {
		case <-w.turn:
			if kq.epOpen {
				h.advanceLocked(kq, kq.ep)
			}
		default:
		}
	}
	h.dropIfIdleLocked(kq)
}

// unqueueLocked removes wid from kq's queue. current reports whether it
// had the episode's latest turn.
func (h *hub) unqueueLocked(kq *keyq, wid string) (found, current bool) {
	i := slices.IndexFunc(kq.queue, func(e *entry) bool { return e.wid == wid })
	if i < 0 {
		return false, false
	}
	kq.queue = slices.Delete(kq.queue, i, i+1)
	return true, kq.epOpen && kq.epLast == wid
}

// pruneLocked drops queued waiters whose own timeout has passed.
func (h *hub) pruneLocked(kq *keyq) {
	now := time.Now()
	for i := 0; i < len(kq.queue); {
		if e := kq.queue[i]; e.w == nil && now.After(e.deadline) {
			h.unqueueLocked(kq, e.wid)
			continue
		}
		i++
	}
}

// prepare is called by a waiter before it waits: once the LISTEN connection
// is confirmed, a waiter that has not queued yet says so to every process
// (q), for at most timeout. It returns the prefix of the notification its
// acquire should send (a), or "" when it has not queued.
func (h *hub) prepare(ctx context.Context, w *waiter, timeout time.Duration) (note string) {
	h.mu.Lock()
	send := h.state == lnOn && !w.announced && timeout > 0
	pos := w.pos
	if send {
		w.announced = true
		w.deadline = time.Now().Add(timeout)
	}
	announced := w.announced
	h.mu.Unlock()
	if send {
		q := "q " + w.kq.kh + " " + w.wid + " " + strconv.FormatInt(max(timeout.Milliseconds(), 1), 10) + " "
		if pos != 0 {
			// Announced again (a new LISTEN connection): same place.
			h.send(ctx, q+strconv.FormatInt(pos, 10), false)
		} else {
			h.send(ctx, q, true)
		}
	}
	if !announced {
		return ""
	}
	return "a " + w.kq.kh + " " + w.wid + " "
}

// announce sends notifications through the pool, one after the other; it
// is run in the background.
func (h *hub) announce(payloads ...string) {
	for _, p := range payloads {
		ctx, cancel := context.WithTimeout(context.Background(), h.releaseTimeout)
		h.send(ctx, p, false)
		cancel()
	}
}

// sendPool sends one notification through the pool. Its transaction
// commits without waiting for the WAL flush (nothing in it needs to be
// durable), so it costs a round trip, not an fsync. With stamp, the
// statement appends the server's clock, in microseconds: the position of a
// q, the same for every hub that reads it.
func (h *hub) sendPool(ctx context.Context, payload string, stamp bool) {
	q := "SELECT set_config('synchronous_commit', 'off', true), pg_notify($1::text, $2::text)"
	if stamp {
		q = "SELECT set_config('synchronous_commit', 'off', true), " +
			"pg_notify($1::text, $2::text || (floor(extract(epoch FROM clock_timestamp()) * 1000000))::bigint::text)"
	}
	_ = h.exec(ctx, q, wakeChannel(h.table), payload)
}

// attemptSeq returns the key's event count, read before an attempt.
func (h *hub) attemptSeq(w *waiter) uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return w.kq.seq
}

// failed records a failed attempt by w that started at seq. If a free
// event came meanwhile, the key may be free again: a new episode. If not,
// the key is held: the episode ends. retryIn (> 0) reschedules the key's
// expiry turn.
func (h *hub) failed(w *waiter, seq uint64, retryIn time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	kq := w.kq
	if kq.seq != seq {
		h.episodeLocked(kq)
	} else {
		h.endEpisodeLocked(kq)
	}
	if retryIn > 0 {
		h.expiresInLocked(kq, retryIn)
	}
	h.ensureListenerLocked() // after a failure, once its retry time has come
}

// acquired records that w got the key: the next turn is due when that lock
// expires, unless released before.
func (h *hub) acquired(w *waiter, ttlLeft time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	w.kq.known = true
	if ttlLeft > 0 {
		h.expiresInLocked(w.kq, ttlLeft)
	}
}

// holderAnnounced reports whether w's retry can be skipped: the LISTEN
// connection is confirmed and the key's holder is known to notify its
// release (see keyq.known).
func (h *hub) holderAnnounced(w *waiter) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.state == lnOn && w.kq.known
}

// expiresInLocked (re)arms the key's expiry turn.
func (h *hub) expiresInLocked(kq *keyq, d time.Duration) {
	at := time.Now().Add(d)
	if kq.expiry != nil {
		kq.expiry.Stop()
	}
	kq.expAt = at
	kq.expiry = time.AfterFunc(d, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.keys[kq.kh] == kq && kq.expAt.Equal(at) {
			h.freeLocked(kq.kh)
		}
	})
}

// freeLocked records that kh may be free now.
func (h *hub) freeLocked(kh string) {
	h.seq++
	h.recent[h.seq%uint64(len(h.recent))] = freeEvent{kh: kh, seq: h.seq}
	if kq := h.keys[kh]; kq != nil {
		h.episodeLocked(kq)
	}
}

// candidate is one turn of an episode: a queued waiter (e), or a waiter of
// this process that has not queued (w).
type candidate struct {
	e *entry
	w *waiter
}

func (h *hub) candidatesLocked(kq *keyq) []candidate {
	h.pruneLocked(kq)
	out := make([]candidate, 0, len(kq.queue)+len(kq.waiters))
	for _, e := range kq.queue {
		out = append(out, candidate{e: e, w: e.w})
	}
	for _, w := range kq.waiters {
		if !w.queued {
			out = append(out, candidate{w: w})
		}
	}
	return out
}

// episodeLocked starts a new episode of kq: the key may be free.
func (h *hub) episodeLocked(kq *keyq) {
	drainTurnsLocked(kq)
	kq.seq++
	kq.known = false
	kq.ep++
	kq.epLast, kq.epOpen = "", true
	h.advanceLocked(kq, kq.ep)
}

func (h *hub) endEpisodeLocked(kq *keyq) {
	drainTurnsLocked(kq)
	kq.epOpen = false
	if kq.epTimer != nil {
		kq.epTimer.Stop()
	}
}

// drainTurnsLocked takes back the turns that this process's waiters of kq
// have not used yet: when an episode ends (the key is held) or a new one
// starts (it gives the turns again, in queue order), a turn left over from
// before would let its waiter attempt out of order, and take the key ahead
// of the queue if a release came just then.
func drainTurnsLocked(kq *keyq) {
	for _, w := range kq.waiters {
		select {
		case <-w.turn:
		default:
		}
	}
}

// advanceLocked gives the next candidate of episode ep its turn, and
// arranges for the one after to get one grantStagger later.
func (h *hub) advanceLocked(kq *keyq, ep uint64) {
	if kq.epTimer != nil {
		kq.epTimer.Stop()
	}
	if !kq.epOpen || kq.ep != ep {
		return
	}
	var c candidate
	for _, cand := range h.candidatesLocked(kq) {
		if cand.e != nil && cand.e.turnEp != ep || cand.e == nil && cand.w.turnEp != ep {
			c = cand
			break
		}
	}
	if c.e == nil && c.w == nil {
		kq.epOpen = false // everyone had a turn
		return
	}
	if c.e != nil {
		c.e.turnEp = ep
		kq.epLast = c.e.wid
	}
	if c.w != nil {
		c.w.turnEp = ep
		kq.epLast = c.w.wid
		select {
		case c.w.turn <- struct{}{}:
		default:
		}
	}
	kq.epTimer = time.AfterFunc(grantStagger, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if !kq.epOpen || kq.ep != ep {
			return
		}
		if c.e != nil && c.w == nil {
			// Another process's waiter let its turn pass.
			if c.e.misses++; c.e.misses >= missLimit {
				h.unqueueLocked(kq, c.e.wid)
			}
		}
		h.advanceLocked(kq, ep)
		h.dropIfIdleLocked(kq)
	})
}

// released is called by Backend.Release after it deleted a lock of kh.
// The statement's own r, which carries h.token, may come back through the
// LISTEN connection before or after: it is not a new event.
func (h *hub) released(kh string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.freeLocked(kh)
}

// resyncLocked starts an episode for every key: events may have been
// missed (the LISTEN connection just started, or broke) or the queue may
// no longer be shared.
func (h *hub) resyncLocked(forgetQueue bool) {
	for kh, kq := range h.keys {
		kq.gone = nil
		if forgetQueue {
			kq.reg = regNone // the session that held it is gone
			kq.queue = nil
			for _, w := range kq.waiters {
				w.queued, w.announced = false, false
			}
		}
		h.freeLocked(kh)
		h.dropIfIdleLocked(kq)
	}
}

// pruneAll drops the queued waiters whose timeout passed (their a or c
// never came: their process died) and forgets keys nobody waits for.
func (h *hub) pruneAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, kq := range h.keys {
		h.pruneLocked(kq)
		h.dropIfIdleLocked(kq)
	}
}

// dispatch handles one notification payload; it returns the token of a
// probe.
func (h *hub) dispatch(payload string) (probe string) {
	f := strings.Fields(payload)
	if len(f) < 2 {
		return ""
	}
	kind, kh := f[0], f[1]
	if kind == "p" {
		return kh
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	switch kind {
	case "r":
		if len(f) >= 3 && f[2] == h.token {
			return "" // this Backend's own release: released handles it
		}
		h.freeLocked(kh)
	case "x":
		// The lock was shortened: the first waiter's attempt takes the key
		// or learns the new expiry.
		h.freeLocked(kh)
	case "s":
		if kh != h.token {
			h.resendLocked()
		}
	case "q":
		if len(f) < 4 || !isHex(kh, 16) || !isHex(f[2], 16) {
			return "" // not a q of ours: any role can NOTIFY on the channel
		}
		ms, err := strconv.ParseInt(f[3], 10, 64)
		if err != nil || ms <= 0 {
			return ""
		}
		ms = min(ms, maxQueuedMs)
		if kq := h.keys[kh]; kq == nil && len(h.keys) >= maxKeys || kq != nil && len(kq.queue) >= maxQueue {
			return "" // bounded memory
		}
		kq := h.keyLocked(kh)
		if kq.gone[f[2]] || slices.Contains(kq.left, f[2]) {
			return "" // a waiter that already left
		}
		if slices.ContainsFunc(kq.queue, func(e *entry) bool { return e.wid == f[2] }) {
			return "" // announced again (a reconnect, a sync): keep its place
		}
		var pos int64
		if len(f) >= 5 {
			pos, _ = strconv.ParseInt(f[4], 10, 64)
		}
		if pos == 0 && len(kq.queue) > 0 {
			pos = kq.queue[len(kq.queue)-1].pos // no place given: last
		}
		e := &entry{wid: f[2], pos: pos, deadline: time.Now().Add(time.Duration(ms) * time.Millisecond)}
		for _, w := range kq.waiters {
			if w.wid == e.wid {
				e.w, w.queued = w, true
				e.turnEp = w.turnEp
				if w.pos == 0 {
					w.pos = pos
				}
			}
		}
		// After every entry at the same place or before: ties go by arrival.
		i := len(kq.queue)
		for i > 0 && kq.queue[i-1].pos > pos {
			i--
		}
		kq.queue = slices.Insert(kq.queue, i, e)
	case "a":
		kq := h.keys[kh]
		if kq == nil || len(f) < 4 {
			return ""
		}
		kq.leftLocked(f[2])
		if kq.gone[f[2]] {
			delete(kq.gone, f[2]) // ours, handled when it acquired
			return ""
		}
		kq.known = true
		if found, _ := h.unqueueLocked(kq, f[2]); !found {
			// Not queued here: a waiter of this process (handled when it
			// acquired), or unknown.
			return ""
		}
		h.endEpisodeLocked(kq)
		if exp, err := strconv.ParseInt(f[3], 10, 64); err == nil && len(kq.waiters) > 0 {
			now := time.Now().UnixMilli() + h.skewMs.Load()
			if d := time.Duration(exp+rules.ToleranceMs+1-now) * time.Millisecond; d > 0 {
				h.expiresInLocked(kq, d)
			}
		}
		h.dropIfIdleLocked(kq)
	case "c":
		if kq := h.keys[kh]; kq != nil && len(f) >= 3 {
			kq.leftLocked(f[2])
			if kq.gone[f[2]] {
				delete(kq.gone, f[2])
				return ""
			}
			if _, current := h.unqueueLocked(kq, f[2]); current {
				// The episode was waiting for it: move on.
				h.advanceLocked(kq, kq.ep)
			}
			h.dropIfIdleLocked(kq)
		}
	}
	return ""
}

// leftLocked records that waiter wid left the queue (its a or c came).
func (kq *keyq) leftLocked(wid string) {
	if len(kq.left) >= leftMax {
		kq.left = slices.Delete(kq.left, 0, 1)
	}
	kq.left = append(kq.left, wid)
}

// resendLocked answers another hub's sync request (s): it announces again,
// in the background, each of this process's queued waiters, at its place
// and for the rest of its timeout. Hubs that know them keep them where
// they are; the hub that asked learns their places.
//
// One goroutine at a time does it: requests that come while it runs (any
// role can NOTIFY on the channel, as often as it likes) make it run once
// more, not start another.
func (h *hub) resendLocked() {
	if h.resending {
		h.resendAgain = true
		return
	}
	h.resending = true
	go func() {
		for {
			h.mu.Lock()
			h.resendAgain = false
			var qs []string
			for _, kq := range h.keys {
				for _, w := range kq.waiters {
					left := time.Until(w.deadline).Milliseconds()
					if !w.queued || w.pos == 0 || left <= 0 {
						continue
					}
					qs = append(qs, "q "+kq.kh+" "+w.wid+" "+strconv.FormatInt(left, 10)+" "+strconv.FormatInt(w.pos, 10))
				}
			}
			h.mu.Unlock()
			h.announce(qs...)
			h.mu.Lock()
			again := h.resendAgain
			h.resending = again
			h.mu.Unlock()
			if !again {
				return
			}
		}
	}()
}

// isHead reports whether w is the first of this process's waiters for its
// key.
func (h *hub) isHead(w *waiter) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(w.kq.waiters) > 0 && w.kq.waiters[0] == w
}

// pollFor gives the first of this process's waiters for w's key a turn,
// for a retry due for w, unless the LISTEN connection is confirmed: then
// releases wake the waiters, and the first one's own retries are enough to
// find a release that sends no notification (the reference
// implementation's, sharing the tables).
func (h *hub) pollFor(w *waiter) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.state != lnOn && len(w.kq.waiters) > 0 {
		select {
		case w.kq.waiters[0].turn <- struct{}{}:
		default:
		}
	}
}

// sawServerTime records the server clock (ms) read by an attempt whose
// answer arrived at local time at.
func (h *hub) sawServerTime(serverMs int64, at time.Time) {
	h.skewMs.Store(serverMs - at.UnixMilli())
}

// The LISTEN connection of a hub (see wake.go): at most one per Backend,
// opened when the first waiter waits, through the dialect's
// driver.Listener capability, confirmed by a probe notification sent
// through the pool, pinged when quiet, and closed after listenIdle without
// waiters. A failure (no capability, a pooler that does not forward
// notifications, a broken connection) is logged once per Backend, and
// waiting falls back to polling until a later waiter tries again, no
// sooner than listenRetryMin after the failure (doubling up to
// listenRetryMax).

// Tunables of the LISTEN connection. Variables, so that tests can shorten
// them.
var (
	listenOpenTimeout  = 10 * time.Second // opening the LISTEN connection
	listenProbeTimeout = 3 * time.Second  // the probe's round trip through it
	listenIdle         = 30 * time.Second // close it after this long without waiters
	listenQuiet        = 10 * time.Second // ping it after this long without a notification
	listenRetryMin     = 5 * time.Second  // first retry after a failure, doubling
	listenRetryMax     = 5 * time.Minute
)

// Listener states.
const (
	lnOff      = iota // no LISTEN connection (none yet, idle-closed, or failed)
	lnStarting        // opening it
	lnProbing         // listening; the probe has not come back yet
	lnOn              // confirmed
)

// ensureListenerLocked starts the LISTEN connection if waiting needs one
// and none is open or being opened.
func (h *hub) ensureListenerLocked() {
	if h.lst == nil {
		h.logFallbackLocked()
		return
	}
	if h.state != lnOff || time.Now().Before(h.retryAt) {
		return
	}
	h.state = lnStarting
	h.settled = make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	h.stopListener, h.listenerDone = cancel, make(chan struct{})
	go func() {
		defer close(h.listenerDone)
		h.runListener(ctx)
	}()
}

func (h *hub) logFallbackLocked() {
	if h.logged {
		return
	}
	h.logged = true
	h.logger.Warn("syncguard: waiting for contended locks falls back to polling; releases by other processes are found by retries and expiry, not at once",
		slog.String("table", h.table), slog.String("reason", h.reason))
}

// setState moves the listener to state; reason explains lnOff after a
// failure ("" for an idle close).
func (h *hub) setState(state int, reason string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	old := h.state
	h.state = state
	if (state == lnOn || state == lnOff) && (old == lnStarting || old == lnProbing) {
		close(h.settled)
	}
	switch state {
	case lnOn:
		h.retryWait = listenRetryMin
		h.reason = ""
		// Waiters may queue now: let them.
		for _, kq := range h.keys {
			for _, w := range kq.waiters {
				select {
				case w.nudge <- struct{}{}:
				default:
				}
			}
		}
	case lnOff:
		if reason != "" { // a failure, not an idle close
			h.reason = reason
			h.retryAt = time.Now().Add(h.retryWait)
			h.retryWait = min(2*h.retryWait, listenRetryMax)
			h.logFallbackLocked()
		} else {
			h.reason = "the LISTEN connection was closed (idle for " + listenIdle.String() + ", or Backend.Close)"
		}
		// Events may have been missed, and the queue is no longer shared.
		h.resyncLocked(true)
	}
}

// askSync asks the other hubs (s) to announce their queued waiters again,
// so that this one learns the places of those that queued before it
// listened. Sent once per LISTEN connection, once it is confirmed and has
// registered its keys: a release of a key that commits after the answers
// reaches this hub after them, whatever the order it runs its listener
// loop in.
func (h *hub) askSync() { go h.announce("s " + h.token) }

// runListener owns the LISTEN connection from opening to closing, which
// happens after listenIdle without waiters, on a failure, or when life ends
// (Backend.Close).
func (h *hub) runListener(life context.Context) {
	ctx, cancel := context.WithTimeout(life, listenOpenTimeout)
	nc, err := h.lst.Listen(ctx, h.db, wakeChannel(h.table))
	cancel()
	if life.Err() != nil {
		if nc != nil {
			nc.Close()
		}
		h.setState(lnOff, "")
		return
	}
	if err != nil {
		h.setState(lnOff, "opening the LISTEN connection failed: "+h.cl.wrap(ctx, "listen", err).Error())
		return
	}
	defer nc.Close()
	h.mu.Lock()
	h.state = lnProbing
	h.resyncLocked(false) // releases between the waiters' attempts and LISTEN
	h.mu.Unlock()

	token := randToken()
	pctx, cancel := context.WithTimeout(life, listenProbeTimeout)
	err = h.exec(pctx, "SELECT pg_notify($1::text, $2::text)", wakeChannel(h.table), "p "+token)
	var sendErr error
	if err != nil {
		sendErr = h.cl.wrap(pctx, "listen", err) // before cancel: the error is not a cancellation
	}
	cancel()
	if life.Err() != nil {
		h.setState(lnOff, "")
		return
	}
	if sendErr != nil {
		h.setState(lnOff, "sending the probe notification failed: "+sendErr.Error())
		return
	}
	probeBy := time.Now().Add(listenProbeTimeout)
	heard, pruned := time.Now(), time.Now()
	asked := false // the sync request (s) was sent
	for {
		h.mu.Lock()
		state, idle := h.state, h.nwait == 0 && time.Since(h.idleSince) >= listenIdle
		h.mu.Unlock()
		if state == lnOn && idle {
			h.setState(lnOff, "")
			return
		}
		slice := listenQuiet
		if state == lnProbing {
			slice = time.Until(probeBy)
			if slice <= 0 {
				h.setState(lnOff, fmt.Sprintf("the probe notification did not come back through the LISTEN connection within %v "+
					"(a pooler in transaction mode, such as PgBouncer, does not forward notifications)", listenProbeTimeout))
				return
			}
		}
		if state == lnOn {
			if err := h.syncRegistrations(life, nc); err != nil {
				h.setState(lnOff, "registering the waited-for keys on the LISTEN connection failed: "+h.cl.wrap(life, "listen", err).Error())
				return
			}
			if !asked {
				asked = true
				h.askSync()
			}
		}
		wctx, cancel := context.WithTimeout(life, min(slice, listenIdle))
		h.mu.Lock()
		h.kick = cancel
		if state == lnOn && h.unregisteredLocked() {
			cancel() // registrations came in meanwhile
		}
		h.mu.Unlock()
		payload, err := nc.Wait(wctx)
		timedOut := wctx.Err() != nil
		h.mu.Lock()
		h.kick = nil
		h.mu.Unlock()
		cancel()
		if life.Err() != nil {
			h.setState(lnOff, "")
			return
		}
		if err != nil && !timedOut {
			h.setState(lnOff, "the LISTEN connection failed: "+h.cl.wrap(context.Background(), "listen", err).Error())
			return
		}
		if time.Since(pruned) >= listenQuiet {
			h.pruneAll()
			pruned = time.Now()
		}
		if err != nil {
			if state == lnOn && time.Since(heard) >= listenQuiet {
				pctx, cancel := context.WithTimeout(context.Background(), listenProbeTimeout)
				err := nc.Ping(pctx)
				cancel()
				if err != nil {
					h.setState(lnOff, "the LISTEN connection failed a ping: "+h.cl.wrap(pctx, "listen", err).Error())
					return
				}
				heard = time.Now()
			}
			continue
		}
		heard = time.Now()
		if p := h.dispatch(payload); p != "" && p == token && state == lnProbing {
			h.setState(lnOn, "")
		}
	}
}

// status reports the listener's state; with settle it first opens the
// LISTEN connection if needed and waits (bounded by ctx) until its probe
// came back or it failed.
func (h *hub) status(ctx context.Context, settle bool) NotificationStatus {
	h.mu.Lock()
	if settle {
		h.nwait++ // keep it open while we look
		h.ensureListenerLocked()
		ch := h.settled
		starting := h.state == lnStarting || h.state == lnProbing
		h.mu.Unlock()
		if starting {
			select {
			case <-ch:
			case <-ctx.Done():
			}
		}
		h.mu.Lock()
		h.nwait--
		if h.nwait == 0 {
			h.idleSince = time.Now()
		}
	}
	defer h.mu.Unlock()
	st := NotificationStatus{Active: h.state == lnOn, Reason: h.reason}
	switch h.state {
	case lnStarting:
		st.Reason = "the LISTEN connection is being opened"
	case lnProbing:
		st.Reason = "the LISTEN connection is open; its probe has not come back yet"
	}
	return st
}

// close stops the LISTEN connection, if any, and waits until it is closed.
func (h *hub) close() {
	h.mu.Lock()
	stop, done := h.stopListener, h.listenerDone
	h.stopListener = nil
	h.mu.Unlock()
	if stop != nil {
		stop()
		<-done
	}
}

// Registration states of a key (keyq.reg).
const (
	regNone = iota
	regHeld
)

// regLinger: a key stays registered this long after its last local waiter
// left, so that a process that waits for a key again and again does not
// register it each time.
var regLinger = 10 * time.Second

// unregisteredLocked reports whether a key with local waiters lacks its
// registration.
func (h *hub) unregisteredLocked() bool {
	for _, kq := range h.keys {
		if len(kq.waiters) > 0 && kq.reg == regNone && !kq.regBusy {
			return true
		}
	}
	return false
}

// syncRegistrations runs on the listener goroutine: it registers the keys
// that have local waiters, and gives each newly registered key's waiters a
// turn (a release before the registration notified nobody), and drops the
// registrations that lingered long enough without waiters. A registration
// that meets a release of the key in progress (which holds the exclusive
// lock on the same id until it commits) fails with 55P03 and is tried again
// 5 ms later. One statement each (lib/pq's ListenerConn takes no more),
// and nothing but the advisory lock stays in the session.
func (h *hub) syncRegistrations(life context.Context, nc driver.NotifyConn) error {
	h.mu.Lock()
	var add, drop []*keyq
	for _, kq := range h.keys {
		switch {
		case kq.reg == regNone && len(kq.waiters) > 0 && !kq.regBusy:
			add = append(add, kq)
		case kq.reg == regHeld && len(kq.waiters) == 0 && !kq.regIdle.IsZero() && time.Since(kq.regIdle) >= regLinger:
			drop = append(drop, kq)
		}
	}
	h.mu.Unlock()
	exec := func(sql string) error {
		ctx, cancel := context.WithTimeout(life, listenProbeTimeout)
		defer cancel()
		return nc.Exec(ctx, sql)
	}
	for _, kq := range add {
		err := exec(fmt.Sprintf("DO $$BEGIN IF NOT pg_try_advisory_lock_shared(%d, %d) THEN RAISE EXCEPTION 'busy' USING ERRCODE = '55P03'; END IF; END$$",
			h.class, waitID(kq.kh)))
		h.mu.Lock()
		switch {
		case err == nil:
			kq.reg = regHeld
			h.episodeLocked(kq)
		case h.cl.dialect != nil && h.cl.dialect.Inspect(err).SQLState == "55P03":
			kq.regBusy = true // retried after a pause
			time.AfterFunc(5*time.Millisecond, func() {
				h.mu.Lock()
				defer h.mu.Unlock()
				kq.regBusy = false
				if h.kick != nil {
					h.kick()
				}
			})
		}
		h.mu.Unlock()
		if err != nil && (h.cl.dialect == nil || h.cl.dialect.Inspect(err).SQLState != "55P03") {
			return err
		}
	}
	for _, kq := range drop {
		if err := exec(fmt.Sprintf("SELECT pg_advisory_unlock_shared(%d, %d)", h.class, waitID(kq.kh))); err != nil {
			return err
		}
		h.mu.Lock()
		kq.reg = regNone
		h.dropIfIdleLocked(kq)
		h.mu.Unlock()
	}
	return nil
}
