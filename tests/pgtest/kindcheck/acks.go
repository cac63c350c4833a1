package kindcheck

import (
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/syncguard/syncguard-go/tests/pgtest/history"
)

// Ack is one acquire a client was acknowledged: the fence it got for one
// fence key (a semaphore's key and slot, an rwlock writer's key, one key
// of a multilock set, a mutex key).
type Ack struct {
	Kind, Key    string
	Fence        int64
	Worker, Lock string // Lock: HashKey of the lockId
	Sent, Acked  time.Time
}

// Acks is the clients' record of acknowledged acquires; safe for
// concurrent use. It is the evidence of what a crash or failover lost:
// the audit loses it too, but a client does not forget.
type Acks struct {
	mu   sync.Mutex
	acks []Ack
}

// Add records an acknowledged acquire.
func (a *Acks) Add(k Ack) {
	a.mu.Lock()
	a.acks = append(a.acks, k)
	a.mu.Unlock()
}

// All returns the record.
func (a *Acks) All() []Ack {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]Ack(nil), a.acks...)
}

// Count returns the acquires recorded of kind.
func (a *Acks) Count(kind string) int {
	n := 0
	for _, k := range a.All() {
		if k.Kind == kind {
			n++
		}
	}
	return n
}

func fenceKey(k Ack) string { return k.Kind + " " + k.Key }

// MaxBefore returns, per kind and key ("kind key"), the largest fence
// acknowledged before t.
func (a *Acks) MaxBefore(t time.Time) map[string]int64 {
	m := map[string]int64{}
	for _, k := range a.All() {
		if k.Acked.Before(t) && k.Fence > m[fenceKey(k)] {
			m[fenceKey(k)] = k.Fence
		}
	}
	return m
}

// Cut is a crash or failover at At, with MaxBefore taken then.
type Cut struct {
	At  time.Time
	Max map[string]int64
}

// Check judges the record: no fence acknowledged twice for one key (a
// failover that lost an acknowledged acquire hands its fence out again),
// and every acquire sent after a cut got a fence above every fence
// acknowledged before it. The rules are per kind ("kind: " + RuleAckTwice,
// RuleAckAfter).
func (a *Acks) Check(cuts []Cut) []history.Violation {
	all := a.All()
	sort.SliceStable(all, func(i, j int) bool { return all[i].Acked.Before(all[j].Acked) })
	var vs []history.Violation
	seen := map[string]map[int64]Ack{}
	for _, k := range all {
		fk := fenceKey(k)
		if seen[fk] == nil {
			seen[fk] = map[int64]Ack{}
		}
		if prev, ok := seen[fk][k.Fence]; ok && prev.Lock != k.Lock {
			vs = append(vs, history.Violation{Rule: k.Kind + ": " + RuleAckTwice, Key: k.Key, At: k.Acked,
				Detail: fmt.Sprintf("fence %d acknowledged to %s (lock %s) at %s and to %s (lock %s) at %s",
					k.Fence, prev.Worker, prev.Lock, prev.Acked.Format(time.StampMilli), k.Worker, k.Lock, k.Acked.Format(time.StampMilli))})
			continue
		}
		seen[fk][k.Fence] = k
		for _, c := range cuts {
			if k.Sent.After(c.At) && k.Fence <= c.Max[fk] {
				vs = append(vs, history.Violation{Rule: k.Kind + ": " + RuleAckAfter, Key: k.Key, At: k.Acked,
					Detail: fmt.Sprintf("fence %d (%s, lock %s) sent at %s, after the fault at %s; fence %d was acknowledged before it",
						k.Fence, k.Worker, k.Lock, k.Sent.Format(time.StampMilli), c.At.Format(time.StampMilli), c.Max[fk])})
			}
		}
	}
	return vs
}
