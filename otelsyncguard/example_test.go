package otelsyncguard_test

import (
	"context"
	"fmt"
	"time"

	"github.com/syncguard/syncguard-go/election"
	"github.com/syncguard/syncguard-go/otelsyncguard"
	"github.com/syncguard/syncguard-go/syncguard"
	"github.com/syncguard/syncguard-go/syncguardtest"
)

// Make one Tracer and set it in the Backend's Config. Metrics and spans
// go to the global providers (otel.SetMeterProvider,
// otel.SetTracerProvider) unless WithMeterProvider and WithTracerProvider
// say otherwise; docs/observability.md sets up a Prometheus endpoint.
func Example() {
	ctx := context.Background()
	tracer := otelsyncguard.New(
		otelsyncguard.WithKeyLabel(func(key string) string {
			return "nightly-report" // a bounded label per job, never the key itself
		}))
	defer tracer.Close()
	locks := syncguardtest.New() // in a program: syncguard.New(db, &syncguard.Config{Tracer: tracer})
	locks.SetTracer(tracer)

	// A span "syncguard.with_lock" around the wait, fn and the release.
	err := syncguard.WithLock(ctx, locks, "jobs:nightly-report", func(ctx context.Context, lease *syncguard.Lease) error {
		fmt.Println("building the report with fence", lease.Fence())
		return nil
	}, &syncguard.LockOptions{TTL: time.Minute})
	fmt.Println("err:", err)
	// Output:
	// building the report with fence 000000000000001
	// err: <nil>
}

// Each candidate of an election reports its leader status (1 or 0, from
// its first campaign on), the newest term it saw and the leadership
// changes it saw: syncguard_election_leader, syncguard_election_term and
// syncguard_election_changes_total. docs/observability.md has the alerts.
func ExampleNewElectionMetrics() {
	ctx := context.Background()
	locks := syncguardtest.New() // in a program: syncguard.New(db, nil)
	em := otelsyncguard.NewElectionMetrics("billing-leader")
	defer em.Close()
	e, err := election.New(locks, "billing:leader", &election.Options{OnStatus: em.OnStatus})
	if err != nil {
		panic(err)
	}
	term, err := e.Campaign(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println("leading with term", term.Fence())
	fmt.Println("resign:", term.Resign(ctx))
	// Output:
	// leading with term 000000000000001
	// resign: <nil>
}
