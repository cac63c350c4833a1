package sgbench

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/syncguard/syncguard-go/internal/kit"
	"github.com/syncguard/syncguard-go/internal/rules"
	"github.com/syncguard/syncguard-go/syncguard"
)

// The bench's -trace option: a Queuer wrapper around a process's locker
// that records each attempt of each syncguard waiter, and each wait's end,
// as JSON lines (kept in memory during the run, appended to the file at
// Flush, one write per line, so that the processes of a run can share
// one file):
//
//	{"ev":"attempt","pid":..,"key":..,"wait":n,"n":i,"t_ms":..,"at_ms":..,"dur_ms":..,"ok":..,
//	 "fence":..,"rank":..,"holder_fence":..,"listened":..,"woken":..,
//	 "pace_ms":..,"wake":..,"retry_ms":..}
//	{"ev":"wait","pid":..,"key":..,"wait":n,"total_ms":..,"attempts":..,"ok":..,"start_ms":..}
//
// at_ms, start_ms: Unix milliseconds of the attempt's send and of the
// wait's start; t_ms: the attempt's send, from the wait's start (Queue); dur_ms: how long
// the attempt took (a grant read from a notification takes no statement:
// about 0); fence: the fence taken (ok); rank and holder_fence: the
// waiter's place and the holder's fence as this attempt saw them (the
// Backend's queueWaiter.TracePlace); listened: its key's channel was
// listened on after the attempt (a grant reaches it); woken: the attempt
// came before the time the previous Next gave, with a wake channel (its
// wake-up cued it);
// pace_ms: after a failed attempt, how long Next chose to wait (-1: no
// time, only the wake channel); wake: Next gave a wake channel; retry_ms:
// the caller's retry schedule's next attempt, for comparison; id: a hash
// of the lockId taken (a waiter's lockId is its queue row's).
//
// SampleQueue adds, from the process that runs the workload, the key's
// queue and lock rows every few milliseconds:
//
//	{"ev":"rows","key":..,"at_ms":..,"lock":{"id":..,"fence":..,"left_ms":..},
//	 "waiters":[{"id":..,"place_ms":..,"left_ms":..,"near":..,"notified":..,"ttl_ms":..}]}

// Tracer collects the records of one process.
type Tracer struct {
	path  string
	mu    sync.Mutex
	lines [][]byte
	waits atomic.Int64
}

// NewTracer returns a Tracer that appends to path.
func NewTracer(path string) *Tracer { return &Tracer{path: path} }

func (t *Tracer) add(v map[string]any) {
	v["pid"] = os.Getpid()
	b, err := json.Marshal(v)
	if err != nil {
		return
	}
	t.mu.Lock()
	t.lines = append(t.lines, append(b, '\n'))
	t.mu.Unlock()
}

// Flush appends the records to the file and forgets them.
func (t *Tracer) Flush() error {
	t.mu.Lock()
	lines := t.lines
	t.lines = nil
	t.mu.Unlock()
	f, err := os.OpenFile(t.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	for _, l := range lines {
		if _, err := f.Write(l); err != nil {
			f.Close()
			return err
		}
	}
	return f.Close()
}

// Wrap returns l with its waiters traced; l's Queue is forwarded.
func (t *Tracer) Wrap(l syncguard.Locker) syncguard.Locker { return traceLocker{l, t} }

type traceLocker struct {
	syncguard.Locker
	t *Tracer
}

// Queue implements kit.Queuer (nil when l has no queue: Lock polls).
func (c traceLocker) Queue(key, identity string, once bool) kit.Wait {
	q, ok := c.Locker.(kit.Queuer)
	if !ok {
		return nil
	}
	w := q.Queue(key, identity, once)
	if w == nil {
		return nil
	}
	return &traceWaiter{Wait: w, t: c.t, key: key, id: c.t.waits.Add(1), start: time.Now()}
}

// Release records each release: {"ev":"release","id":..,"at_ms":..,
// "dur_ms":..,"ok":..} (id: the lockId's hash, as an attempt's).
func (c traceLocker) Release(ctx context.Context, lockID string) (syncguard.ReleaseResult, error) {
	sent := time.Now()
	r, err := c.Locker.Release(ctx, lockID)
	c.t.add(map[string]any{"ev": "release", "id": idHash(lockID), "at_ms": unixMs(sent), "dur_ms": ms(time.Since(sent)), "ok": err == nil && r.OK})
	return r, err
}

// placer is the Backend's waiter's trace hook.
type placer interface {
	TracePlace() (rank, fence int64, listened bool)
}

type traceWaiter struct {
	kit.Wait
	t        *Tracer
	key      string
	id       int64
	start    time.Time
	n        int
	wake     <-chan struct{}
	at       time.Time      // the last Next's time
	last     map[string]any // the last attempt's record, until Next completes it
	finished bool
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1e3 }

func (w *traceWaiter) flushLast() {
	if w.last != nil {
		w.t.add(w.last)
		w.last = nil
	}
}

func (w *traceWaiter) Attempt(ctx context.Context, ttl time.Duration) (syncguard.AcquireResult, error) {
	w.flushLast()
	sent := time.Now()
	// woken: sent before the time the last Next gave, so its wake channel
	// cued it (as waiting.Pace infers it: receiving from the channel here
	// would take a wake-up from the loop)
	woken := w.wake != nil && (w.at.IsZero() || sent.Before(w.at))
	res, err := w.Wait.Attempt(ctx, ttl)
	dur := time.Since(sent)
	w.n++
	rec := map[string]any{"ev": "attempt", "key": w.key, "wait": w.id, "n": w.n, "t_ms": ms(sent.Sub(w.start)), "at_ms": unixMs(sent),
		"dur_ms": ms(dur), "ok": err == nil && res.OK, "woken": woken}
	if err != nil {
		rec["err"] = err.Error()
	}
	if res.OK {
		rec["id"] = idHash(res.LockID) // the waiter's lockId, which the lock keeps
		rec["fence"] = string(res.Fence)
		rec["handed_over_ms"] = ms(res.HandedOver)
	}
	if p, ok := w.Wait.(placer); ok {
		rec["rank"], rec["holder_fence"], rec["listened"] = p.TracePlace()
	}
	w.last = rec
	if err == nil && res.OK {
		w.flushLast()
		w.end(true)
	}
	return res, err
}

func (w *traceWaiter) Next(retry time.Time) (<-chan struct{}, time.Time) {
	wake, at := w.Wait.Next(retry)
	now := time.Now()
	w.wake, w.at = wake, at
	if w.last != nil {
		w.last["wake"] = wake != nil
		w.last["pace_ms"] = -1.0
		if !at.IsZero() {
			w.last["pace_ms"] = ms(at.Sub(now))
		}
		if !retry.IsZero() {
			w.last["retry_ms"] = ms(retry.Sub(now))
		}
		w.flushLast()
	}
	return wake, at
}

func (w *traceWaiter) Leave(ctx context.Context) error {
	w.flushLast()
	w.end(false)
	return w.Wait.Leave(ctx)
}

func (w *traceWaiter) end(ok bool) {
	if w.finished {
		return
	}
	w.finished = true
	w.t.add(map[string]any{"ev": "wait", "key": w.key, "wait": w.id, "total_ms": ms(time.Since(w.start)), "attempts": w.n, "ok": ok,
		"start_ms": w.start.UnixMilli()})
}

// idHash names a lockId in a trace without writing the capability.
func idHash(lockID string) string {
	h := sha256.Sum256([]byte(lockID))
	return hex.EncodeToString(h[:4])
}

// SampleQueue records the rows of userKey in table (a Backend's lock
// table) and its waiters table every every, from start until end.
func (t *Tracer) SampleQueue(ctx context.Context, db *sql.DB, table, userKey string, every time.Duration, start, end time.Time) {
	lq := `SELECT "lock_id", "fence", "expires_at_ms" - (extract(epoch from clock_timestamp())*1000)::bigint FROM ` + rules.QuoteIdent(table) + ` WHERE "user_key" = $1`
	wq := `SELECT "lock_id", "place", "deadline_ms" - (extract(epoch from clock_timestamp())*1000)::bigint, "near", "notified", "ttl_ms" FROM ` +
		rules.QuoteIdent(table+"_waiters") + ` WHERE "user_key" = $1 ORDER BY "place", "lock_id"`
	time.Sleep(time.Until(start))
	for now := time.Now(); now.Before(end) && ctx.Err() == nil; now = time.Now() {
		rec := map[string]any{"ev": "rows", "key": userKey, "at_ms": unixMs(now)}
		var id, fence string
		var left int64
		if err := db.QueryRowContext(ctx, lq, userKey).Scan(&id, &fence, &left); err == nil {
			rec["lock"] = map[string]any{"id": idHash(id), "fence": fence, "left_ms": left}
		}
		var ws []map[string]any
		if rows, err := db.QueryContext(ctx, wq, userKey); err == nil {
			for rows.Next() {
				var near, notified bool
				var place, wleft, ttl int64
				if rows.Scan(&id, &place, &wleft, &near, &notified, &ttl) == nil {
					ws = append(ws, map[string]any{"id": idHash(id), "place_ms": place / 1000, "left_ms": wleft, "near": near, "notified": notified, "ttl_ms": ttl})
				}
			}
			rows.Close()
		}
		rec["waiters"] = ws
		t.add(rec)
		time.Sleep(every)
	}
}

// unixMs is t in Unix milliseconds, to the microsecond.
func unixMs(t time.Time) float64 { return float64(t.UnixMicro()) / 1e3 }
