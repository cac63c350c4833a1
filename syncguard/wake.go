package syncguard

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/syncguard/syncguard-go/driver"
)

// Waiting for a contended key (Lock, WithLock) is driven by a hub, one per
// Backend (shared by its WithTx views). See "Waiting" in docs/design.md.
//
// Signals. The statements announce, with pg_notify on the lock table's
// channel (wakeChannel), every change that can end a wait; the
// notification is delivered when the statement's transaction commits:
//
//	r <kh>              a lock row was deleted (release, cleanup)
//	x <kh> <expires>    an extend shortened the lock
//	a <kh> <wid> <exp>  queued waiter wid acquired the key
//	q <kh> <wid>        waiter wid queued for the key
//	c <kh> <wid>        waiter wid left the queue without the key
//	p <token>           the hub's own probe of its LISTEN connection
//
// kh is wakeKeyHash of the storage key: 16 hex digits of its SHA-256, so
// keys never appear on the channel, which any role can LISTEN to.
//
// The hub keeps, per key hash with waiters in this process, the local
// waiters in arrival order and the key's expiry as learned by the last
// failed attempt. A free event (r, x, a release by this process, the
// expiry passing, the LISTEN connection (re)starting) gives the first
// waiter a turn to attempt. The LISTEN connection (at most one per hub) is
// opened when the first waiter waits, through the dialect's
// driver.Listener capability, confirmed by a probe notification, and
// closed after listenIdle without waiters. Without it (no capability, a
// pooler that does not forward notifications, a broken connection) waiting
// still works: releases by this process wake its waiters directly, and the
// attempts scheduled by AcquisitionOptions and by the learned expiry find
// every other release.

// wakeChannel returns the notification channel of a lock table.
func wakeChannel(table string) string { return "syncguard:" + table }

// wakeChannelSQL is the channel as a SQL string literal (table names are
// plain identifiers, so nothing needs escaping).
func wakeChannelSQL(table string) string { return "'" + wakeChannel(table) + "'" }

var wakeHashRE = regexp.MustCompile(`\{\{wake_hash\(([^()]*)\)\}\}`)

// renderWake expands {{wake_hash(expr)}} in a statement file: wakeKeyHash
// in SQL, over the storage key expr. ({{channel}} is a plain name.)
func renderWake(text string) string {
	return wakeHashRE.ReplaceAllString(text, "left(encode(sha256(convert_to($1, 'UTF8')), 'hex'), 16)")
}

// wakeKeyHash is the key hash carried by notifications.
func wakeKeyHash(storageKey string) string {
	sum := sha256.Sum256([]byte(storageKey))
	return hex.EncodeToString(sum[:8])
}

// Tunables of the hub. Variables, so that tests can shorten them.
var (
	listenOpenTimeout  = 10 * time.Second // opening the LISTEN connection
	listenProbeTimeout = 3 * time.Second  // the probe's round trip through it
	listenIdle         = 30 * time.Second // close it after this long without waiters
	listenQuiet        = 30 * time.Second // ping it after this long without a notification
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

// NotificationStatus says whether waiting on a Backend is woken by
// notifications. See Backend.NotificationStatus.
type NotificationStatus struct {
	// Active is true while the Backend's LISTEN connection is open and its
	// probe came back: a release anywhere wakes this Backend's waiters.
	Active bool
	// Reason says why not, when Active is false: no waiter has waited yet,
	// the dialect lacks the capability, or the last attempt's error.
	Reason string
}

type hub struct {
	s      *shared
	lst    driver.Listener // nil: the dialect cannot listen
	logged bool            // the fallback was logged (once per hub)

	mu     sync.Mutex
	keys   map[string]*keyq
	nwait  int    // waiters (and status checks) registered
	seq    uint64 // free events seen, all keys
	recent [64]freeEvent
	// listener
	state     int
	reason    string    // why state is lnOff, for status and the log
	retryAt   time.Time // no new LISTEN connection before this
	retryWait time.Duration
	idleSince time.Time
	settled   chan struct{} // closed when state leaves lnStarting/lnProbing
}

type freeEvent struct {
	kh  string
	seq uint64
}

// keyq is the waiting state of one key hash.
type keyq struct {
	kh      string
	waiters []*waiter // arrival order; waiters[0] is the head
	seq     uint64    // free events seen for this key
	expiry  *time.Timer
	expAt   time.Time // when expiry fires
}

type waiter struct {
	kq   *keyq
	turn chan struct{} // capacity 1: attempt now
}

func newHub(s *shared) *hub {
	h := &hub{s: s, keys: map[string]*keyq{}, retryWait: listenRetryMin}
	h.lst, _ = s.cfg.dialect.(driver.Listener)
	if h.lst == nil {
		h.reason = fmt.Sprintf("the dialect %q cannot LISTEN (it does not implement driver.Listener)", s.cfg.dialect.Name())
	} else {
		h.reason = "no waiter has waited yet"
	}
	return h
}

// seqNow returns the count of free events so far; join compares it with
// the events recorded since.
func (h *hub) seqNow() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.seq
}

// busy reports whether kh has waiters in this process: a new caller then
// queues behind them instead of trying first.
func (h *hub) busy(kh string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	kq := h.keys[kh]
	return kq != nil && len(kq.waiters) > 0
}

// join registers a waiter for kh. since is seqNow() from before the
// caller's last attempt: a free event of kh after it gives the new waiter
// its turn at once (the release raced the attempt). retryIn, when > 0, is
// how long until the holder's lock, as that attempt saw it, can be taken.
func (h *hub) join(kh string, since uint64, retryIn time.Duration) *waiter {
	h.mu.Lock()
	defer h.mu.Unlock()
	kq := h.keys[kh]
	if kq == nil {
		kq = &keyq{kh: kh}
		h.keys[kh] = kq
	}
	w := &waiter{kq: kq, turn: make(chan struct{}, 1)}
	kq.waiters = append(kq.waiters, w)
	h.nwait++
	h.ensureListenerLocked()
	if h.missedLocked(kh, since) {
		h.grantLocked(kq)
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

// leave unregisters w. A waiter that gives up passes an unused turn on.
func (h *hub) leave(w *waiter, acquired bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	kq := w.kq
	head := len(kq.waiters) > 0 && kq.waiters[0] == w
	for i, x := range kq.waiters {
		if x == w {
			kq.waiters = append(kq.waiters[:i], kq.waiters[i+1:]...)
			break
		}
	}
	h.nwait--
	if h.nwait == 0 {
		h.idleSince = time.Now()
	}
	if len(kq.waiters) == 0 {
		if kq.expiry != nil {
			kq.expiry.Stop()
		}
		delete(h.keys, kq.kh)
		return
	}
	if !acquired && head {
		select {
		case <-w.turn:
			h.grantLocked(kq)
		default:
		}
	}
}

// attemptSeq returns the key's event count, read before an attempt.
func (h *hub) attemptSeq(w *waiter) uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return w.kq.seq
}

// failed records a failed attempt by w that started at seq: if a free event
// came meanwhile the head tries again; retryIn (> 0) reschedules the
// key's expiry turn.
func (h *hub) failed(w *waiter, seq uint64, retryIn time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	kq := w.kq
	if kq.seq != seq {
		h.grantLocked(kq)
	}
	h.ensureListenerLocked() // after a failure, once its retry time has come
	if retryIn > 0 {
		h.expiresInLocked(kq, retryIn)
	}
}

// acquired records that a waiter of this process got the key: the next
// turn is due when that lock expires, unless released before.
func (h *hub) acquired(w *waiter, ttlLeft time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if ttlLeft > 0 {
		h.expiresInLocked(w.kq, ttlLeft)
	}
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

// grantLocked gives the key's head waiter a turn.
func (h *hub) grantLocked(kq *keyq) {
	if len(kq.waiters) == 0 {
		return
	}
	select {
	case kq.waiters[0].turn <- struct{}{}:
	default:
	}
}

// freeLocked records that kh may be free now and gives its head a turn.
func (h *hub) freeLocked(kh string) {
	h.seq++
	h.recent[h.seq%uint64(len(h.recent))] = freeEvent{kh: kh, seq: h.seq}
	if kq := h.keys[kh]; kq != nil {
		kq.seq++
		h.grantLocked(kq)
	}
}

// released is called by Backend.Release after it deleted a lock of kh.
func (h *hub) released(kh string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.freeLocked(kh)
}

// resyncLocked gives every key a turn: events may have been missed (the
// LISTEN connection just started, or broke).
func (h *hub) resyncLocked() {
	for kh := range h.keys {
		h.freeLocked(kh)
	}
}

// dispatch handles one notification payload.
func (h *hub) dispatch(payload string) (probe string) {
	kind, rest, _ := strings.Cut(payload, " ")
	kh, _, _ := strings.Cut(rest, " ")
	switch kind {
	case "r", "x":
		// x: the lock was shortened; the head's next attempt learns the
		// new expiry (or takes the key).
		h.released(kh)
	case "p":
		return rest
	}
	return ""
}

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
	go h.runListener()
}

func (h *hub) logFallbackLocked() {
	if h.logged {
		return
	}
	h.logged = true
	h.s.cfg.logger.Warn("syncguard: waiting for contended locks falls back to polling; releases by other processes are found by retries and expiry, not at once",
		slog.String("table", h.s.cfg.table), slog.String("reason", h.reason))
}

// setState moves the listener to state; reason explains lnOff.
func (h *hub) setState(state int, reason string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	old := h.state
	h.state = state
	if state == lnOff {
		h.reason = reason
	}
	if (state == lnOn || state == lnOff) && (old == lnStarting || old == lnProbing) {
		close(h.settled)
	}
	switch state {
	case lnOn:
		h.retryWait = listenRetryMin
		h.reason = ""
	case lnOff:
		if reason != "" { // a failure, not an idle close
			h.retryAt = time.Now().Add(h.retryWait)
			h.retryWait = min(2*h.retryWait, listenRetryMax)
			h.logFallbackLocked()
			h.resyncLocked()
		}
	}
}

// runListener owns the LISTEN connection from opening to closing.
func (h *hub) runListener() {
	ctx, cancel := context.WithTimeout(context.Background(), listenOpenTimeout)
	nc, err := h.lst.Listen(ctx, h.s.db, wakeChannel(h.s.cfg.table))
	cancel()
	if err != nil {
		h.setState(lnOff, "opening the LISTEN connection failed: "+h.s.cl.wrap(ctx, "listen", err).Error())
		return
	}
	defer nc.Close()
	h.mu.Lock()
	h.state = lnProbing
	h.resyncLocked() // releases between the waiters' attempts and LISTEN
	h.mu.Unlock()

	token := randToken()
	go h.sendProbe(token)
	probeBy := time.Now().Add(listenProbeTimeout)
	heard := time.Now()
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
		wctx, cancel := context.WithTimeout(context.Background(), min(slice, listenIdle))
		payload, err := nc.Wait(wctx)
		timedOut := wctx.Err() != nil
		cancel()
		if err != nil && !timedOut {
			h.setState(lnOff, "the LISTEN connection failed: "+h.s.cl.wrap(context.Background(), "listen", err).Error())
			return
		}
		if err != nil {
			if state == lnOn && time.Since(heard) >= listenQuiet {
				pctx, cancel := context.WithTimeout(context.Background(), listenProbeTimeout)
				err := nc.Ping(pctx)
				cancel()
				if err != nil {
					h.setState(lnOff, "the LISTEN connection failed a ping: "+h.s.cl.wrap(pctx, "listen", err).Error())
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

// sendProbe sends the probe notification through the pool.
func (h *hub) sendProbe(token string) {
	ctx, cancel := context.WithTimeout(context.Background(), listenProbeTimeout)
	defer cancel()
	_, _ = h.s.db.ExecContext(ctx, "SELECT pg_notify($1, $2)", wakeChannel(h.s.cfg.table), "p "+token)
}

func randToken() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
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

// NotificationStatus reports whether Lock and WithLock on b are woken by
// notifications when a contended key is released (Active), or fall back to
// polling, and why. With check set it first opens the Backend's LISTEN
// connection if none is open and waits, at most until ctx is done, for its
// probe notification to come back; syncguard doctor uses it. Without check
// it does no I/O.
func (b *Backend) NotificationStatus(ctx context.Context, check bool) NotificationStatus {
	return b.shared.hub.status(ctx, check)
}

// parseMs parses a decimal millisecond count of a payload.
func parseMs(s string) (int64, bool) {
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}

// isHead reports whether w is the first of its key's waiters.
func (h *hub) isHead(w *waiter) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(w.kq.waiters) > 0 && w.kq.waiters[0] == w
}

// grantHead gives the head of w's key a turn.
func (h *hub) grantHead(w *waiter) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.grantLocked(w.kq)
}
