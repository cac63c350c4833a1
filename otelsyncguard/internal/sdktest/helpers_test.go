package sdktest

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/syncguard/syncguard-go/election"
	"github.com/syncguard/syncguard-go/otelsyncguard"
	"github.com/syncguard/syncguard-go/syncguard"
	"github.com/syncguard/syncguard-go/syncguardtest"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// The election and the alert rules of docs/observability.md
// ("Elections"), with the documented parameters.
const (
	electionKey  = "billing:leader"
	electionName = "billing-leader"
	// interval is how often the test scrapes every live candidate and
	// evaluates the rules (Prometheus' scrape and evaluation interval).
	interval = time.Second
	// noLeaderFor is SyncguardNoLeader's "for:".
	noLeaderFor = time.Minute
	// flapWindow and flapMax are SyncguardLeaderFlapping's range and
	// bound: increase(...[1h]) > 10.
	flapWindow = time.Hour
	flapMax    = 10
)

// killable is one simulated process's connection to the database: while
// dead, every operation fails as in an outage, so a lock it holds is
// never extended again and expires at its TTL.
type killable struct {
	syncguard.LockBackend
	dead atomic.Bool
}

func (k *killable) down(op string) error {
	if k.dead.Load() {
		return &syncguard.Error{Op: op, Code: syncguard.ErrServiceUnavailable, Msg: "process killed or partitioned"}
	}
	return nil
}

func (k *killable) Acquire(ctx context.Context, key string, ttl time.Duration) (syncguard.AcquireResult, error) {
	if err := k.down("acquire"); err != nil {
		return syncguard.AcquireResult{}, err
	}
	return k.LockBackend.Acquire(ctx, key, ttl)
}

func (k *killable) Release(ctx context.Context, lockID string) (syncguard.ReleaseResult, error) {
	if err := k.down("release"); err != nil {
		return syncguard.ReleaseResult{}, err
	}
	return k.LockBackend.Release(ctx, lockID)
}

func (k *killable) Extend(ctx context.Context, lockID string, ttl time.Duration) (syncguard.ExtendResult, error) {
	if err := k.down("extend"); err != nil {
		return syncguard.ExtendResult{}, err
	}
	return k.LockBackend.Extend(ctx, lockID, ttl)
}

func (k *killable) LookupKey(ctx context.Context, key string) (*syncguard.LockInfo, error) {
	if err := k.down("lookup"); err != nil {
		return nil, err
	}
	return k.LockBackend.LookupKey(ctx, key)
}

// candidate is one process of the election: its connection, its own
// MeterProvider with a manual reader (its /metrics), and Run.
type candidate struct {
	id     string
	proc   *killable
	reader *sdkmetric.ManualReader
	em     *otelsyncguard.ElectionMetrics
	gone   bool // killed: its series are gone with it
	cancel context.CancelFunc
	done   chan error
}

// start starts a candidate whose leader's work lasts work (0: until its
// term ends).
func start(t *testing.T, fake *syncguardtest.Backend, id string, work time.Duration) *candidate {
	t.Helper()
	c := &candidate{id: id, proc: &killable{LockBackend: fake}, reader: sdkmetric.NewManualReader(), done: make(chan error, 1)}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(c.reader))
	c.em = otelsyncguard.NewElectionMetrics(electionName, otelsyncguard.WithMeterProvider(mp))
	e, err := election.New(c.proc, electionKey, &election.Options{Identity: id, OnStatus: c.em.OnStatus})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	go func() {
		c.done <- e.Run(ctx, func(ctx context.Context, _ *election.Term) error {
			if work == 0 {
				<-ctx.Done()
				return nil
			}
			select {
			case <-time.After(work):
			case <-ctx.Done():
			}
			return nil
		})
	}()
	return c
}

// kill ends the candidate's process as kill -9 would: no resignation, its
// lock expires at its TTL, its series are no longer scraped.
func (c *candidate) kill() {
	c.proc.dead.Store(true)
	c.gone = true
}

// stop ends the candidate (at the end of a test).
func (c *candidate) stop(t *testing.T) {
	t.Helper()
	c.cancel()
	if err := <-c.done; err != nil {
		t.Errorf("%s: Run: %v", c.id, err)
	}
	c.em.Close()
}

// point is one candidate's series at one scrape.
type point struct {
	leader, term, changes int64
	hasTerm, hasChanges   bool
}

// snapshot is one scrape of every live candidate, by candidate (as
// Prometheus' instance label tells the processes apart).
type snapshot struct {
	at     time.Time
	series map[string]point
}

// scrapeOne collects c's reader: its point, and whether it has a leader
// series at all.
func scrapeOne(t *testing.T, c *candidate) (point, bool) {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := c.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var p point
	found := false
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			var pts []metricdata.DataPoint[int64]
			switch d := m.Data.(type) {
			case metricdata.Gauge[int64]:
				pts = d.DataPoints
			case metricdata.Sum[int64]:
				pts = d.DataPoints
				if !d.IsMonotonic || d.Temporality != metricdata.CumulativeTemporality {
					t.Fatalf("%s: want a cumulative monotonic counter, got %+v", m.Name, d)
				}
			default:
				continue
			}
			for _, dp := range pts {
				if v, ok := dp.Attributes.Value(otelsyncguard.AttrElectionName); !ok || v.AsString() != electionName {
					t.Fatalf("%s: point without syncguard.election.name=%s: %v", m.Name, electionName, dp.Attributes.ToSlice())
				}
				switch m.Name {
				case "syncguard.election.leader":
					p.leader, found = dp.Value, true
				case "syncguard.election.term":
					p.term, p.hasTerm = dp.Value, true
				case "syncguard.election.changes":
					p.changes, p.hasChanges = dp.Value, true
				}
			}
		}
	}
	return p, found
}

// rules scrapes the candidates at every interval and evaluates the
// alerts' expressions by value, as Prometheus would.
type rules struct {
	t     *testing.T
	cands []*candidate
	snaps []snapshot
	// SyncguardNoLeader: the time its expression became true (zero when
	// false), and whether it fires (true for noLeaderFor).
	pendingSince time.Time
	firing       bool
}

// scrape collects every candidate not killed.
func (r *rules) scrape() snapshot {
	r.t.Helper()
	s := snapshot{at: time.Now(), series: map[string]point{}}
	for _, c := range r.cands {
		if c.gone {
			continue
		}
		if p, ok := scrapeOne(r.t, c); ok {
			s.series[c.id] = p
		}
	}
	return s
}

// tick lets interval pass, then scrapes and evaluates.
func (r *rules) tick() snapshot {
	r.t.Helper()
	time.Sleep(interval)
	synctest.Wait() // everything due at this instant has run
	s := r.scrape()
	r.snaps = append(r.snaps, s)
	if noLeader(s) {
		if r.pendingSince.IsZero() {
			r.pendingSince = s.at
		}
		r.firing = s.at.Sub(r.pendingSince) >= noLeaderFor
	} else {
		r.pendingSince, r.firing = time.Time{}, false
	}
	return s
}

// noLeader is SyncguardNoLeader's expression,
// max by (syncguard_election_name) (syncguard_election_leader) < 1:
// no result (false) when no candidate exports a series.
func noLeader(s snapshot) bool {
	if len(s.series) == 0 {
		return false
	}
	top := int64(-1)
	for _, p := range s.series {
		top = max(top, p.leader)
	}
	return top < 1
}

// changesIncrease is
// max by (syncguard_election_name) (increase(syncguard_election_changes_total[window]))
// at the last snapshot: per series (candidate), the counter's increase
// over the samples in the window, a drop counted as a reset (a restarted
// process starts from 0), as increase() does (without its extrapolation
// to the window's edges, which only adds); the largest over the series.
// ok is false when no series has two samples in the window.
func (r *rules) changesIncrease(window time.Duration) (top int64, ok bool) {
	if len(r.snaps) == 0 {
		return 0, false
	}
	now := r.snaps[len(r.snaps)-1].at
	prev := map[string]int64{}
	inc := map[string]int64{}
	for _, s := range r.snaps {
		if !s.at.After(now.Add(-window)) {
			continue
		}
		for id, p := range s.series {
			if !p.hasChanges {
				continue
			}
			if last, seen := prev[id]; seen {
				if p.changes >= last {
					inc[id] += p.changes - last
				} else {
					inc[id] += p.changes // a reset
				}
				ok = true
				top = max(top, inc[id])
			}
			prev[id] = p.changes
		}
	}
	return top, ok
}
