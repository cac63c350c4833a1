package linear

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/syncguard/syncguard-go/tests/pgtest/history"
)

// Rule is the rule a failed check reports (history.Violation.Rule).
const Rule = "the history is linearizable (lease-lock and fenced-resource models, porcupine)"

// Options configures Check. Zero fields take the defaults noted.
type Options struct {
	// Audit is the run's audit (history.ReadAudit); Audited says that it
	// was read (an empty audit of a run that changed nothing is complete
	// too). Without it, operations of unknown outcome stay unknown: the
	// models let them take effect or not.
	Audit   []history.AuditRow
	Audited bool
	// ClockSkew bounds the difference between the servers' clocks and this
	// process's; it widens the window of server times of an operation
	// that returned none (its call and return times). Default 100 ms; a
	// negative value: the clocks are unrelated (such operations are then
	// not checked against expiry).
	ClockSkew time.Duration
	// Timeout bounds the search per key; default 100 s. A key whose search
	// times out is reported as Unknown, not as a violation.
	Timeout time.Duration
	// Dir is where a counterexample's visualisation goes (HTML, one file
	// per key found not linearizable); default os.TempDir().
	Dir string
}

// Result is the checker's verdict.
type Result struct {
	Verdict porcupine.CheckResult // Ok, Illegal, or Unknown (a search timed out)
	// Keys are the partitions found not linearizable (Illegal) or whose
	// search timed out (Unknown), with the visualisation's path for the
	// former.
	Illegal, TimedOut []string
	Files             map[string]string // key -> HTML file
	Ops               int               // operations checked
	Partitions        int
	// Of the client operations of unknown outcome, Committed were found in
	// the audit (checked as successes), NotCommitted were not (dropped:
	// without effect); Unresolved stayed unknown (no audit). AuditOnly are
	// committed changes no client operation accounts for (the lock
	// helper's own attempts and extends, acquires whose reply was lost),
	// checked as operations of their own.
	Committed, NotCommitted, Unresolved, AuditOnly int
	Took                                           time.Duration
}

// Line is the verdict in one line, as the runs print it.
func (r *Result) Line() string {
	s := fmt.Sprintf("linearizability (porcupine; lease-lock and fenced-resource models, by key): %s: %d operations in %d partitions checked in %v; unknown outcomes: %d committed per the audit, %d not, %d unresolved; %d audit-only changes",
		verdictWord(r.Verdict), r.Ops, r.Partitions, r.Took.Round(time.Millisecond), r.Committed, r.NotCommitted, r.Unresolved, r.AuditOnly)
	for _, k := range r.Illegal {
		s += fmt.Sprintf("\n  NOT linearizable: %s; counterexample: %s", k, r.Files[k])
	}
	for _, k := range r.TimedOut {
		s += "\n  search timed out: " + k
	}
	return s
}

func verdictWord(v porcupine.CheckResult) string {
	switch v {
	case porcupine.Ok:
		return "OK"
	case porcupine.Illegal:
		return "VIOLATION"
	}
	return "UNKNOWN (timed out)"
}

// Violations are the result's failures as history violations (nil when
// the verdict is Ok or Unknown).
func (r *Result) Violations() []history.Violation {
	var vs []history.Violation
	for _, k := range r.Illegal {
		vs = append(vs, history.Violation{Rule: Rule, Key: k, At: time.Now(),
			Detail: "no order of the operations on this key, consistent with their real-time order, is a legal history of the model; the counterexample: " + r.Files[k]})
	}
	return vs
}

// Check checks ops (history.Ops, plus what the run recorded) against the
// models, partitioned by key.
func Check(ops []history.Op, opts Options) *Result {
	start := time.Now()
	if opts.ClockSkew == 0 {
		opts.ClockSkew = 100 * time.Millisecond
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 100 * time.Second
	}
	if opts.Dir == "" {
		opts.Dir = os.TempDir()
	}
	res := &Result{Verdict: porcupine.Ok, Files: map[string]string{}}
	ops = resolve(ops, opts, res)
	parts := partition(ops, opts)
	res.Partitions = len(parts)
	var mu sync.Mutex
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	var wg sync.WaitGroup
	for _, name := range slices.Sorted(maps.Keys(parts)) {
		p := parts[name]
		res.Ops += len(p.ops)
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			model := p.model.ToModel()
			v, info := porcupine.CheckOperationsVerbose(model, p.ops, opts.Timeout)
			mu.Lock()
			defer mu.Unlock()
			switch v {
			case porcupine.Illegal:
				res.Illegal = append(res.Illegal, name)
				res.Verdict = porcupine.Illegal
				path := filepath.Join(opts.Dir, "linear-"+fileSafe.ReplaceAllString(name, "_")+fmt.Sprintf("-%d.html", time.Now().UnixNano()))
				if err := porcupine.VisualizePath(model, info, path); err != nil {
					path = "(visualisation failed: " + err.Error() + ")"
				}
				res.Files[name] = path
			case porcupine.Unknown:
				res.TimedOut = append(res.TimedOut, name)
				if res.Verdict == porcupine.Ok {
					res.Verdict = porcupine.Unknown
				}
			}
		}()
	}
	wg.Wait()
	slices.Sort(res.Illegal)
	slices.Sort(res.TimedOut)
	res.Took = time.Since(start)
	return res
}

var fileSafe = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

type part struct {
	model porcupine.NondeterministicModel
	ops   []porcupine.Operation
}

// partition turns ops into porcupine operations, one partition per key's
// lock and one per key's resource.
func partition(ops []history.Op, opts Options) map[string]*part {
	var end time.Time
	for _, o := range ops {
		for _, t := range []time.Time{o.Call, o.Return} {
			if t.After(end) {
				end = t
			}
		}
	}
	never := end.Add(time.Second).UnixNano() // the return of what never returned
	parts := map[string]*part{}
	clients := map[string]map[string]int{}
	for _, o := range ops {
		name, model := "lock "+o.Key, LockModel
		if o.Kind == history.OpWrite {
			name, model = "resource "+o.Key, ResourceModel
		}
		p := parts[name]
		if p == nil {
			p = &part{model: model}
			parts[name] = p
			clients[name] = map[string]int{}
		}
		id, ok := clients[name][o.Client]
		if !ok {
			id = len(clients[name])
			clients[name][o.Client] = id
		}
		in := input{Kind: o.Kind, Lock: o.Lock, Fence: o.Fence, AtMs: o.ServerMs, ExpiresMs: o.ExpiresMs, Client: o.Client}
		if in.AtMs == 0 && opts.ClockSkew > 0 {
			in.LoMs = o.Call.Add(-opts.ClockSkew).UnixMilli()
			if !o.Return.IsZero() {
				in.HiMs = o.Return.Add(opts.ClockSkew).UnixMilli()
			}
		}
		ret := never
		if !o.Return.IsZero() {
			ret = max(o.Return.UnixNano(), o.Call.UnixNano())
		}
		p.ops = append(p.ops, porcupine.Operation{ClientId: id, Input: in, Output: o.Outcome, Call: o.Call.UnixNano(), Return: ret})
	}
	return parts
}

// resolve drops the operations that cannot change the verdict (failed
// acquires: legal in every state, without effect), resolves the unknown
// outcomes with the audit, and adds the audit's changes that no client
// operation accounts for.
func resolve(ops []history.Op, opts Options, res *Result) []history.Op {
	var out []history.Op
	for _, o := range ops {
		if o.Kind == history.OpAcquire && o.Outcome == history.Fail {
			continue
		}
		out = append(out, o)
	}
	if !opts.Audited {
		for _, o := range out {
			if o.Outcome == history.Unknown {
				res.Unresolved++
			}
		}
		return out
	}
	type xkey struct {
		lock string
		exp  int64
	}
	var events []auditEvent
	for i := range opts.Audit {
		events = append(events, auditEvents(&opts.Audit[i])...)
	}
	grants, extends, releases := map[string]auditEvent{}, map[xkey]auditEvent{}, map[string]auditEvent{}
	ttl := map[string]int64{}
	for _, e := range events {
		a := e.row
		switch e.kind {
		case history.OpAcquire:
			grants[e.lock] = e
			ttl[e.lock] = a.NewExpires - a.AcquiredAt
		case history.OpExtend:
			extends[xkey{e.lock, a.NewExpires}] = e
		case history.OpRelease, history.OpExpire:
			releases[e.lock] = e
		}
	}
	matched := map[auditEvent]bool{}
	kept := out[:0]
	for _, o := range out {
		switch {
		case o.Kind == history.OpAcquire && o.Outcome == history.OK:
			if e, ok := grants[o.Lock]; ok {
				matched[e] = true
			}
		case o.Kind == history.OpExtend && o.Outcome == history.OK:
			if e, ok := extends[xkey{o.Lock, o.ExpiresMs}]; ok {
				matched[e] = true
			}
		case o.Kind == history.OpRelease && o.Outcome != history.Fail:
			e, ok := releases[o.Lock]
			switch {
			case ok:
				matched[e] = true
				if o.Outcome == history.Unknown {
					o.Outcome = history.OK
					res.Committed++
				}
			case o.Outcome == history.Unknown:
				res.NotCommitted++
				continue
			}
		case o.Outcome == history.Unknown && o.Kind != history.OpWrite:
			// An acquire or extend that may have committed: if it did, the
			// audit has its change, which is added below.
			res.NotCommitted++
			continue
		}
		kept = append(kept, o)
	}
	skew := max(opts.ClockSkew, 0)
	for _, e := range events {
		if matched[e] || e.handOff {
			continue
		}
		a := e.row
		o := history.Op{Client: "audit", Key: a.Key, Outcome: history.OK, Fence: a.Fence, Source: "audit",
			Call: time.UnixMilli(a.AtMs).Add(-skew), Kind: e.kind, Lock: e.lock}
		switch e.kind {
		case history.OpAcquire:
			o.ServerMs, o.ExpiresMs = a.AcquiredAt, a.NewExpires
		case history.OpExtend:
			o.ExpiresMs, o.ServerMs = a.NewExpires, a.AtMs
			if t, ok := ttl[e.lock]; ok {
				o.ServerMs = a.NewExpires - t
			}
		case history.OpExpire:
			o.ServerMs = a.AtMs
		}
		res.AuditOnly++
		kept = append(kept, o)
	}
	return kept
}

// Describe lists the operations of one partition in call order, for a
// report (the visualisation shows the same with the model's states).
func Describe(ops []history.Op, key string) string {
	var b strings.Builder
	for _, o := range ops {
		if o.Key == key {
			fmt.Fprintf(&b, "%s %s %s %s fence=%d server=%d expires=%d %s\n", o.Call.Format("15:04:05.000"), o.Client, o.Kind, short(o.Lock), o.Fence, o.ServerMs, o.ExpiresMs, o.Outcome)
		}
	}
	return b.String()
}

// auditEvent is one change of a lock that an audit row records. A row
// records two when a release hands the key over: its UPDATE ends the old
// lock and grants the waiter's, in one commit.
type auditEvent struct {
	row     *history.AuditRow
	kind    history.OpKind // OpAcquire, OpExtend, OpRelease or OpExpire
	lock    string
	handOff bool // the release half of a hand-off: it only resolves its holder's release
}

// auditEvents reads an audit row of the lock table (placeholder rows,
// fence 0, are never live: none). An INSERT, or an UPDATE that changes the
// lockId, grants the new lock; that UPDATE also releases the old one when
// it was live (a hand-off; a takeover of an expired lock releases
// nothing). An UPDATE of the same lock to expiry 0 releases it keeping
// its row (release_keep.sql); another change of expiry extends it. A
// DELETE releases the lock, or removes an expired one.
func auditEvents(a *history.AuditRow) []auditEvent {
	if a.Table != "locks" || a.Fence == 0 {
		return nil
	}
	end := func(lock string) auditEvent {
		// The statement read its clock before the trigger did: a lock live
		// at the trigger's time was live at the statement's.
		if live(a.OldExpires, a.AtMs) {
			return auditEvent{row: a, kind: history.OpRelease, lock: lock}
		}
		return auditEvent{row: a, kind: history.OpExpire, lock: lock}
	}
	switch {
	case a.Op == "INSERT":
		return []auditEvent{{row: a, kind: history.OpAcquire, lock: a.NewLock}}
	case a.Op == "UPDATE" && a.OldLock != a.NewLock:
		ev := []auditEvent{{row: a, kind: history.OpAcquire, lock: a.NewLock}}
		if live(a.OldExpires, a.AtMs) {
			// A hand-off, if the old lock's holder released it: the audit
			// cannot tell that from a takeover of a live lock, so this
			// release counts only for a release the history has.
			ev = append(ev, auditEvent{row: a, kind: history.OpRelease, lock: a.OldLock, handOff: true})
		}
		return ev
	case a.Op == "UPDATE" && a.NewExpires == 0 && a.OldExpires != 0:
		return []auditEvent{end(a.OldLock)}
	case a.Op == "UPDATE" && a.NewExpires != a.OldExpires:
		return []auditEvent{{row: a, kind: history.OpExtend, lock: a.NewLock}}
	case a.Op == "DELETE":
		return []auditEvent{end(a.OldLock)}
	}
	return nil
}
