package sdktest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/syncguard/syncguard-go/election"
	"github.com/syncguard/syncguard-go/otelsyncguard"
	"github.com/syncguard/syncguard-go/syncguardtest"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// Three candidates with the default TTL (15 s). A follower exports leader
// status 0 and the leader's term before it ever leads. The leader is
// killed: the no-leader expression is true until a follower takes over at
// the dead leader's expiry, too short for SyncguardNoLeader (for: 1m) to
// fire. Then the last follower is cut off from the database and the new
// leader is killed: nobody can take over, and the alert fires 1m after
// the kill; it clears when the follower, reconnected, is elected.
func TestNoLeaderAlertWhenTheLeaderIsKilled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := syncguardtest.New()
		a := start(t, fake, "a", 0)
		r := &rules{t: t, cands: []*candidate{a}}
		for i := 0; r.tick().series["a"].leader != 1; i++ {
			if i == 10 {
				t.Fatal("a is not elected")
			}
		}
		b, c := start(t, fake, "b", 0), start(t, fake, "c", 0)
		r.cands = append(r.cands, b, c)
		s := r.tick()
		termA := s.series["a"].term
		for _, f := range []*candidate{b, c} {
			p, ok := s.series[f.id]
			if !ok || p.leader != 0 || !p.hasTerm || p.term != termA || !p.hasChanges || p.changes != 0 {
				t.Errorf("follower %s before it ever led: %+v (series: %v), want leader status 0, term %d, no changes", f.id, p, ok, termA)
			}
		}
		if noLeader(s) {
			t.Errorf("no-leader expression true while a leads: %+v", s.series)
		}

		// a is killed: its series vanish, the followers' say 0.
		a.kill()
		killed := time.Now()
		var next, other *candidate
		var noLeaderSince time.Time
		for next == nil {
			if time.Since(killed) > 2*election.DefaultTTL {
				t.Fatalf("no follower elected %v after the leader was killed", time.Since(killed))
			}
			s := r.tick()
			if noLeader(s) && noLeaderSince.IsZero() {
				noLeaderSince = s.at
			}
			for _, f := range []*candidate{b, c} {
				if s.series[f.id].leader == 1 {
					next = f
				}
			}
			if r.firing {
				t.Fatalf("SyncguardNoLeader fired %v after the kill, during a takeover at the lock's expiry", time.Since(killed))
			}
		}
		took := time.Since(killed)
		if noLeaderSince.IsZero() || noLeaderSince.Sub(killed) > interval {
			t.Errorf("no-leader expression became true at %v after the kill (zero: never), want at the first scrape", noLeaderSince.Sub(killed))
		}
		if took > election.DefaultTTL+2*time.Second {
			t.Errorf("takeover %v after the kill, want within the TTL plus the tolerance", took)
		}
		other = b
		if next == b {
			other = c
		}
		r.tick()
		s = r.tick() // the other follower's campaign has read the new term
		if noLeader(s) || r.firing {
			t.Errorf("after the takeover: no-leader %v, firing %v, want both false", noLeader(s), r.firing)
		}
		termNext := s.series[next.id].term
		if termNext <= termA || s.series[other.id].term != termNext || s.series[other.id].leader != 0 {
			t.Errorf("after the takeover by %s: %+v; want its term above %d, seen by %s too", next.id, s.series, termA, other.id)
		}
		for _, f := range []*candidate{next, other} {
			if got := s.series[f.id].changes; got != 1 {
				t.Errorf("%s saw %d leadership changes, want 1 (a to %s)", f.id, got, next.id)
			}
		}
		t.Logf("takeover by %s %v after the kill; no-leader expression true meanwhile, alert not fired", next.id, took)

		// The last follower loses the database, then the leader is killed:
		// nobody can take over.
		other.proc.dead.Store(true)
		next.kill()
		killed = time.Now()
		var firedAt time.Time
		for time.Since(killed) < noLeaderFor+10*interval {
			r.tick()
			if r.firing && firedAt.IsZero() {
				firedAt = time.Now()
			}
		}
		if firedAt.IsZero() {
			t.Fatalf("SyncguardNoLeader did not fire %v after the leader was killed with no follower able to take over", time.Since(killed))
		}
		if d := firedAt.Sub(killed); d < noLeaderFor || d > noLeaderFor+interval {
			t.Errorf("SyncguardNoLeader fired %v after the kill, want %v (its for:) plus at most one evaluation interval", d, noLeaderFor)
		}
		if p := r.snaps[len(r.snaps)-1].series[other.id]; p.leader != 0 || p.term != termNext {
			t.Errorf("the cut-off follower's series %+v, want leader status 0, term %d", p, termNext)
		}

		// Reconnected, it is elected: the alert clears.
		other.proc.dead.Store(false)
		healed := time.Now()
		for r.snaps[len(r.snaps)-1].series[other.id].leader != 1 {
			if time.Since(healed) > 2*election.DefaultTTL {
				t.Fatalf("%s not elected %v after it reconnected", other.id, time.Since(healed))
			}
			r.tick()
		}
		s = r.snaps[len(r.snaps)-1]
		if noLeader(s) || r.firing || s.series[other.id].term <= termNext {
			t.Errorf("after %s's election: no-leader %v, firing %v, series %+v; want the alert cleared and a newer term", other.id, noLeader(s), r.firing, s.series)
		}
		t.Logf("alert fired %v after the second kill, cleared %v after the follower reconnected", firedAt.Sub(killed), time.Since(healed))

		for _, cand := range []*candidate{a, b, c} {
			cand.proc.dead.Store(false) // let the dead ones' campaigns end cleanly
			cand.stop(t)
		}
	})
}

// Leaders that resign every 2 s: SyncguardLeaderFlapping
// (max by (syncguard_election_name) (increase(syncguard_election_changes_total[1h])) > 10)
// does not fire under a steady leader, and fires once more than 10
// changes were seen within the hour, through the counter reset of a
// restarted candidate.
func TestLeaderFlappingAlert(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := syncguardtest.New()
		cands := []*candidate{start(t, fake, "a", 0), start(t, fake, "b", 0), start(t, fake, "c", 0)}
		r := &rules{t: t, cands: cands}
		for range 60 {
			r.tick()
		}
		if inc, ok := r.changesIncrease(flapWindow); !ok || inc != 0 {
			t.Fatalf("increase = %d (%v) under a steady leader, want 0", inc, ok)
		}
		// The processes are redeployed (their counters start again from
		// 0) with work that returns after 2 s: Run resigns, the next
		// candidate is elected, and the old leader campaigns again after
		// Recampaign (1 s).
		for _, c := range cands {
			c.stop(t)
		}
		for i, id := range []string{"a", "b", "c"} {
			cands[i] = start(t, fake, id, 2*time.Second)
		}
		var firedAfter time.Duration
		began := time.Now()
		for i := 0; firedAfter == 0; i++ {
			if i == 120 {
				inc, _ := r.changesIncrease(flapWindow)
				t.Fatalf("SyncguardLeaderFlapping did not fire in 2 min of terms of 2 s: increase %d", inc)
			}
			if i == 10 {
				// b's process is killed and restarts: its counter
				// starts again from 0.
				cands[1].kill()
				cands[1].proc.dead.Store(false)
				cands[1].stop(t)
				cands[1] = start(t, fake, "b", 2*time.Second)
			}
			r.tick()
			if inc, ok := r.changesIncrease(flapWindow); ok && inc > flapMax {
				firedAfter = time.Since(began)
			}
		}
		t.Logf("SyncguardLeaderFlapping fired %v after the flapping began", firedAfter)
		for _, c := range cands {
			c.stop(t)
		}
	})
}

// The metrics' Prometheus names, as docs/observability.md lists them.
func TestPrometheusNames(t *testing.T) {
	reg := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		t.Fatal(err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	defer mp.Shutdown(context.Background())
	em := otelsyncguard.NewElectionMetrics(electionName, otelsyncguard.WithMeterProvider(mp))
	defer em.Close()
	em.OnStatus(election.Status{Leader: false, Term: "000000000000007"})
	em.OnStatus(election.Status{Leader: true, Term: "000000000000009"})
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, f := range families {
		if !strings.HasPrefix(f.GetName(), "syncguard_") {
			continue
		}
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				if strings.HasPrefix(l.GetName(), "syncguard") {
					labels = append(labels, l.GetName()+"="+l.GetValue())
				}
			}
			v := m.GetGauge().GetValue() + m.GetCounter().GetValue()
			got[f.GetName()] = fmt.Sprintf("%s %v %g", f.GetType(), labels, v)
		}
	}
	want := map[string]string{
		"syncguard_election_leader":        "GAUGE [syncguard_election_name=billing-leader] 1",
		"syncguard_election_term":          "GAUGE [syncguard_election_name=billing-leader] 9",
		"syncguard_election_changes_total": "COUNTER [syncguard_election_name=billing-leader] 1",
	}
	for name, w := range want {
		if got[name] != w {
			t.Errorf("%s: %q, want %q", name, got[name], w)
		}
	}
	if len(got) != len(want) {
		t.Errorf("series %v, want only %v", got, want)
	}
}
