package syncguard

import (
	"context"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/syncguard/syncguard-go/internal/rules"
	"github.com/syncguard/syncguard-go/internal/waiting"
)

// The Backend's side of waiting ("Waiting" in docs/design.md): the queue
// is rows of the waiters table; internal/waiting only wakes the waiter
// that a release names.

const defaultWaitWindow = 15 * time.Second

// NotificationStatus says whether waiting on a Backend is woken by
// notifications. See Backend.NotificationStatus.
type NotificationStatus struct {
	// Active is true while the Backend's LISTEN connection is open and its
	// probe came back: a release anywhere wakes the waiter it hands the key.
	Active bool
	// Reason says why not, when Active is false.
	Reason string
	kind   waiting.Kind
}

// NotificationStatus reports whether Lock and WithLock on b are woken the
// moment a release hands them the key, or find out at their next attempt
// (polling), and why. It opens the Backend's LISTEN connection if none is
// open and waits, at most until ctx is done, for its probe notification to
// come back. The order of waiters does not depend on it.
func (b *Backend) NotificationStatus(ctx context.Context) NotificationStatus {
	st := b.shared.waker.Status(ctx)
	return NotificationStatus{Active: st.Active, Reason: st.Reason, kind: st.Kind}
}

// WatchKey returns a channel that receives a value (coalesced) when the
// lock of key may have changed hands, until ctx ends: at each notification
// on the key's own channel (anyone can send one; never another key's), once
// that channel is listened on, and when the LISTEN connection fails (it
// stays open, reopened after a failure). A hint to read the key again: a
// release to no waiter, a takeover at expiry or a Backend without
// notifications sends nothing, so poll as well.
func (b *Backend) WatchKey(ctx context.Context, key string) (<-chan struct{}, error) {
	k, err := checkKey("watch", key)
	if err != nil {
		return nil, err
	}
	s := b.shared.waker.Watch(waiting.Channel(waiting.Prefix(b.shared.cfg.TableName), k.Storage))
	context.AfterFunc(ctx, s.Close)
	return s.C, nil
}

// Close closes the LISTEN connection that wakes waiting Lock calls, if one
// is open, and waits for its goroutine; not the *sql.DB. The Backend stays
// usable, its waits then poll. Unclosed, the connection closes itself 30 s
// after the last wait.
func (b *Backend) Close() error {
	b.shared.waker.Close()
	return nil
}

func newWaker(s *shared) *waiting.Waker {
	w := waiting.Wiring{DB: s.db, NotifyDB: s.cfg.NotifyDB, Dialect: s.cfg.Dialect, Notify: s.notify,
		Logger: s.cfg.Logger, What: "syncguard", Tunables: s.waitCfg.waker}
	if s.cfg.NotifyDB != nil {
		w.Pool = s.notifyPool
	}
	return waiting.NewFor(w)
}

// notify sends a notification: through NotifyDB when it is set (the
// probe, and a wake-up after the commit of the release that hands the key
// over, unless the probe found NotifyDB in the lock database: best
// effort, the waiter's next attempt finds the key anyway), else through
// the pool.
func (s *shared) notify(ctx context.Context, channel, payload string) error {
	if s.cfg.NotifyDB != nil {
		_, err := s.cfg.NotifyDB.ExecContext(ctx, waiting.NotifySQL, channel, payload)
		return err
	}
	return s.notifyPool(ctx, channel, payload)
}

// notifyPool sends a notification through the lock pool.
func (s *shared) notifyPool(ctx context.Context, channel, payload string) error {
	return (&Backend{shared: s}).oneShot(ctx, waiting.NotifySQL, []any{channel, payload}, nil)
}

// queueLost and holdersLost report whether err says that the waiters (or
// holders) table is missing or not granted to this role. The Backend then
// goes on without it for good, warning once ("Without the waiters table"
// in docs/design.md).
func (s *shared) queueLost(err error) bool {
	// A waiters table of an older version, without the "near" column
	// (SetupSchema adds it), counts as missing.
	old := s.sqlState(err) == "42703" && nearColumnRE.MatchString(err.Error())
	return s.tableLost(err, waitersTable(s.cfg.TableName), old, &s.noQueue, &s.queueWarned, "waiting polls and keeps no order")
}

// nearColumnRE finds the "near" column in an undefined-column error
// (`column "near" of relation ...`, `column w.near does not exist`).
var nearColumnRE = regexp.MustCompile(`"near"|\.near\b`)

func (s *shared) holdersLost(err error) bool {
	return s.tableLost(err, holdersTable(s.cfg.TableName), false, &s.noHolders, &s.holdWarned, "no holder identity is stored or shown")
}

func (s *shared) tableLost(err error, table string, old bool, lost, warned *atomic.Bool, until string) bool {
	st := s.sqlState(err)
	if !old && ((st != "42P01" && st != "42501") || !strings.Contains(err.Error(), table)) {
		return false
	}
	lost.Store(true)
	if !warned.Swap(true) {
		s.cfg.Logger.Warn("syncguard: the "+strings.TrimPrefix(table, s.cfg.TableName+"_")+" table is missing, not granted or of an older version: run SetupSchema (or apply SchemaSQL) and grant it like the lock table; until then "+until,
			slog.String("table", table), slog.String("sqlstate", st))
	}
	return true
}

// Spacing by place ("Waiting at scale" in docs/design.md): a waiter
// learns its rank (live waiters ahead, counted up to rankCap) from each
// attempt. Within listenRank of the head it listens and renews its row
// when two thirds of its window have passed; further back it does not listen (its process
// need not be a listening session), its row lives twice as long, and it
// attempts again when the queue's pace says it is about to come within
// listenRank (at least approachMin apart).
const approachMin = 10 * time.Millisecond

// queueState is a queued waiter's place: its lockId, its wake-up, and its
// rank as its attempts saw it.
type queueState struct {
	waiting.Place
	s       *shared
	storage string
	channel string
	absent  atomic.Bool // the last attempt found the key free without a row, its advisory lock held (backend.go)
	ttl     atomic.Int64

	mu             sync.Mutex
	rank, fence    int64         // the last attempt's rank and the holder's fence it saw (0: none)
	rankAt, joined time.Time     // when the last attempt was answered, and the first
	perPlace       time.Duration // how fast the queue moved, per place, between the last two attempts that saw it move (0: not seen)
	still          time.Time     // since when the same holder holds the key, as the attempts saw it
	sent           time.Time     // when the last answered attempt was sent
	sentNow        int64         // and its server time (now_ms)
	confirms       int           // attempts confirming the first one (confirmMin)
}

// join registers the waiter's wake-up before its queued attempt of ttl
// ms, and reports whether a notification reaches it now (its key's
// channel is listened on): a release hands the key only to such a waiter.
func (q *queueState) join(ttlMs int64) bool {
	q.ttl.Store(ttlMs)
	return q.Join(q.s.waker, q.channel)
}

// confirmMin, confirmMax: after its first attempt, behind a live lock and
// with no live waiter ahead, a waiter attempts again confirmMin on,
// doubling, up to confirmMax times while the same holder holds the key.
// A release whose statement started before that attempt committed did not
// see the waiter's row (its snapshot predates it), found no waiter, and
// left the key free without a hint; a release that saw the row hands the
// key over or wakes the waiter. Only the first in the queue can be missed
// so: behind a waiter the release sees, the key is not left free.
const (
	confirmMin = 5 * time.Millisecond
	confirmMax = 5
)

// contended records a failed queued attempt's rank, the holder's fence
// (0: no live lock), its send time and its server time, and asks for the
// key's channel when the waiter is within listenRank of the head.
func (q *queueState) contended(rank, fence int64, sent time.Time, nowMs int64) {
	now := time.Now()
	q.mu.Lock()
	defer q.mu.Unlock()
	switch {
	case rank != 0 || fence == 0:
		q.confirms = 0
	case q.joined.IsZero():
		q.confirms = 1
	case q.confirms > 0 && q.confirms < confirmMax && fence == q.fence:
		q.confirms++
	default:
		q.confirms = 0
	}
	if q.joined.IsZero() {
		q.joined = now
	} else {
		moved := q.rank - rank
		if fence > 0 && q.fence > 0 {
			moved = max(moved, fence-q.fence)
		}
		if moved > 0 {
			q.perPlace = now.Sub(q.rankAt) / time.Duration(moved)
		}
	}
	if fence == 0 || fence != q.fence || q.still.IsZero() {
		q.still = now
	}
	q.rank, q.fence, q.rankAt, q.sent, q.sentNow = rank, fence, now, sent, nowMs
	q.DropGrant(sent)
	if rank <= listenRank {
		q.Listen()
	}
}

// window is how long the waiter's row lives after its next attempt.
func (q *queueState) window() time.Duration {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.rank > listenRank {
		return 2 * q.s.waitCfg.window
	}
	return q.s.waitCfg.window
}

// next is when the waiter attempts again without a cue from a release:
// to renew its row (after two thirds of its window), or, far back, when
// three quarters of the time the queue would take to bring it within
// listenRank at the
// pace it saw between its last two attempts that saw it move (places
// gained, or hand-offs counted by the holder's fence, since the rank is
// counted only up to rankCap) has passed. Before it has seen the queue
// move, the gap doubles with the wait; while one holder keeps the key,
// too, up to the time the queue would take at that pace to make the
// waiter first. A waiter that comes late is asleep (not near, not
// notified): it loses turns until it attends, and holds nobody back
// (acquire.sql's awake), so the pace need not be the fastest ever seen,
// and the waiter may aim late: three quarters, not half (fewer attempts
// per pass through the queue, measured in w7b). The first in the queue
// confirms its first attempt sooner (confirmMin).
func (q *queueState) next() time.Duration {
	renew := q.window() * 2 / 3
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.confirms > 0 {
		return min(confirmMin<<(q.confirms-1), renew)
	}
	if q.rank <= listenRank {
		return renew
	}
	gap := q.rankAt.Sub(q.joined) // doubling until it moved
	if q.perPlace > 0 {
		// While one holder keeps the key the gap doubles, but only up to
		// the time the queue would take at that pace to make the waiter
		// first: the holder may let go at any moment.
		gap = max(q.perPlace*time.Duration(q.rank-listenRank)*3/4, min(q.rankAt.Sub(q.still), q.perPlace*time.Duration(q.rank-1)))
	}
	return min(max(gap, approachMin), renew)
}

// granted returns the key handed to the waiter by a release whose grant
// notification came (internal/waiting/grant.go), for an attempt of ttlMs,
// without a statement. The lock's start in local time is bounded below by
// the last answered attempt: that attempt did not see the grant, so the
// release either started after it was sent, or started at most
// (its server time - the release's) before its statement; the lease
// counts from that bound, so it never believes in a longer lock than the
// server's. When that leaves less than half the TTL, or without a valid
// grant, ok is false and the waiter attempts as usual.
func (q *queueState) granted(ttlMs int64) (res AcquireResult, ok bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.sent.IsZero() {
		return res, false
	}
	g, ok := waiting.ParseGrant(q.LockID, q.Grant())
	if _, err := rules.ParseFence(g.Fence); !ok || err != nil || g.TTLMs != ttlMs {
		return res, false
	}
	start := q.sent.Add(-time.Duration(max(q.sentNow-g.NowMs, 0)) * time.Millisecond)
	age := time.Since(start)
	if age > time.Duration(ttlMs)*time.Millisecond/2 {
		return res, false
	}
	return AcquireResult{OK: true, LockID: q.LockID, Fence: Fence(g.Fence), ExpiresAt: msToTime(g.NowMs + g.TTLMs), HandedOver: age}, true
}
