package waiting

import "time"

// Pace is the schedule of one waiter's attempts, the part every lock
// kind's waiter shares ("When a waiter attempts" in docs/design.md): the
// waiter tells it each attempt's outcome (Attempted) and, after a failed
// one, what it knows of its place (Hint); Next says when to attempt
// again. Used from the waiting goroutine only.
type Pace struct {
	start     time.Time // the first attempt's send
	sent, at  time.Time // the last attempt's send; the time the last Next returned (zero: none)
	wake      bool      // the last Next returned a wake channel
	answered  bool      // the last attempt got an answer
	retryIn   time.Duration
	expiry    time.Time // the holder's lock no longer live, as the last attempts saw it (zero: unknown)
	heedAt    time.Time // a fruitless wake-up's pause: wake-ups count again after it
	hintGap   time.Duration
	pollGap   time.Duration
	holderLo  time.Time // the holder's expiry as polled (a span), and when it was first seen
	holderHi  time.Time
	holderAt  time.Time
	answerAt  time.Time // when the last answer came
	heedAfter bool      // the last attempt was a fruitless wake-up's
}

// Hint is what a waiter knows of its place after a failed attempt.
type Hint struct {
	// Wake receives a value when a release may have handed the key to the
	// waiter; nil: nothing wakes it.
	Wake <-chan struct{}
	// Renew, if not 0, is how soon the next attempt must come (to keep the
	// waiter's place, or as it nears the head).
	Renew time.Duration
	// Poll: no release can hand the waiter the key (no notification
	// reaches it), so it looks for the free key itself, soon.
	Poll bool
	// FarBack: the key is not free for the waiter while those ahead wait,
	// and Renew brings it near the head: the caller's retries are not
	// needed.
	FarBack bool
}

// RetriesQueued: a queued waiter keeps the caller's retries this long
// into its wait: a release in flight when it queued did not see its row,
// and left the key free without a hint. A waiter far back needs none.
const RetriesQueued = 2 * time.Second

// The polling of a waiter that no notification reaches: PollMin doubling
// to PollMax; while the holder's lock stays the same (its expiry, as the
// attempts see it: within the span from an attempt's send to its answer
// plus RetryIn, which a loaded server widens), on to a quarter of how long
// it has stayed, up to PollStall. A hand-off or an extend resets it: short
// holds are polled at PollMax, and a release after a long one waits at
// most a quarter of the hold (or PollStall) for the poll that finds the
// key.
const (
	PollMin   = 5 * time.Millisecond
	PollMax   = 25 * time.Millisecond
	PollStall = time.Second
)

// Attempted records an attempt sent at sent: answered (it got an answer,
// not an outage's error), ok (it took the key), and retryIn, how long the
// holder's lock stays live when it did not (0: unknown).
func (p *Pace) Attempted(sent time.Time, answered, ok bool, retryIn time.Duration) {
	now := time.Now()
	if p.start.IsZero() {
		p.start = sent
	}
	// woken: it came before the time Next gave, so its wake channel cued it
	woken := p.wake && (p.at.IsZero() || sent.Before(p.at))
	p.heedAfter = woken && answered && !ok
	p.sent, p.answerAt, p.answered, p.retryIn = sent, now, answered, 0
	if !p.expiry.IsZero() && !sent.Before(p.expiry) {
		p.expiry = time.Time{}
	}
	if answered && retryIn > 0 {
		p.retryIn, p.expiry = retryIn, now.Add(retryIn)
	}
}

// Next returns when to attempt next: at the first value on wake, or at at
// (zero: no time), whichever comes first. retry is when the caller's
// retry schedule asks for an attempt; it is dropped for a waiter that a
// release will wake, once it has waited RetriesQueued behind a live lock,
// or is far back.
//
// After an attempt that got no answer (an outage's error) the caller's
// retry schedule alone says when (its backoff up to its cap): the waiter's
// renewal and polling are for a server that answers, and a waiter whose
// attempt failed never started listening, so it would poll the outage
// every PollMin-PollMax.
func (p *Pace) Next(retry time.Time, h Hint) (wake <-chan struct{}, at time.Time) {
	now := time.Now()
	at = p.expiry
	if !p.answered {
		at, h.Renew, h.Poll = time.Time{}, 0, false
	}
	earliest := func(t time.Time) {
		if !t.IsZero() && (at.IsZero() || t.Before(at)) {
			at = t
		}
	}
	if h.Wake == nil || !p.answered || !h.FarBack && (p.retryIn == 0 || now.Sub(p.start) <= RetriesQueued) {
		earliest(retry)
	}
	if h.Renew > 0 {
		earliest(now.Add(h.Renew))
	}
	if h.Poll {
		earliest(p.poll(now))
	} else {
		p.pollGap = 0
	}
	wake = h.Wake
	if p.heedAfter {
		// the next wake-up is heeded after a pause (forged or replayed hints)
		p.hintGap = min(max(2*p.hintGap, 5*time.Millisecond), time.Second)
		p.heedAt, p.heedAfter = now.Add(p.hintGap), false
	}
	if wake != nil && now.Before(p.heedAt) {
		wake = nil
		earliest(p.heedAt)
	}
	p.at, p.wake = at, wake != nil
	return wake, at
}

// poll returns the next poll, by the holder's lock as the last attempt saw it.
func (p *Pace) poll(now time.Time) time.Time {
	limit := PollMax
	if p.retryIn > 0 {
		lo, hi := p.sent.Add(p.retryIn), p.answerAt.Add(p.retryIn)
		if lo.After(p.holderHi) || hi.Before(p.holderLo) {
			p.holderLo, p.holderHi, p.holderAt = lo, hi, p.answerAt // another expiry: a hand-off or an extend
		}
		if lo.After(p.holderLo) { // the same holder: keep the spans' overlap
			p.holderLo = lo
		}
		if hi.Before(p.holderHi) {
			p.holderHi = hi
		}
		limit = min(max(limit, p.answerAt.Sub(p.holderAt)/4), PollStall)
	}
	p.pollGap = min(max(2*p.pollGap, PollMin), limit)
	return now.Add(p.pollGap)
}
