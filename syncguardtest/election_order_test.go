package syncguardtest_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/syncguard/syncguard-go/election"
	"github.com/syncguard/syncguard-go/syncguardtest"
)

const runs = 100

// Three candidates, each a process of its own (a WithIdentity view),
// campaign 1 ms apart; each leader works 1 s, resigns, and campaigns
// again 10 ms later, at the back of the queue. Every run gives the same
// leaders in queue order, each elected in the instant of the previous
// resignation (fake time in the bubble).
func TestElectionOrderUnderSynctest(t *testing.T) {
	const want = "c0+0s c1+0s c2+0s c0+0s c1+0s c2+0s c0+0s c1+0s c2+0s"
	for i := range runs {
		if got := electionRound(t); got != want {
			t.Fatalf("run %d: leader+time since the last resignation:\n got %s\nwant %s", i+1, got, want)
		}
	}
}

func electionRound(t *testing.T) (sequence string) {
	synctest.Test(t, func(t *testing.T) {
		locks := syncguardtest.New()
		ctx, stop := context.WithCancel(context.Background())
		defer stop()
		var (
			mu       sync.Mutex
			seq      []string
			resigned = time.Now()
			wg       sync.WaitGroup
		)
		for i := range 3 {
			id := fmt.Sprintf("c%d", i)
			el, err := election.New(locks.WithIdentity(id), "jobs:leader",
				&election.Options{Identity: id, TTL: 15 * time.Second, Recampaign: 10 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			wg.Go(func() {
				_ = el.Run(ctx, func(ctx context.Context, term *election.Term) error {
					mu.Lock()
					if len(seq) == 9 { // stopping
						mu.Unlock()
						return nil
					}
					seq = append(seq, fmt.Sprintf("%s+%v", id, time.Since(resigned)))
					if len(seq) == 9 {
						stop()
					}
					mu.Unlock()
					time.Sleep(time.Second) // the leader's work
					mu.Lock()
					resigned = time.Now() // Run resigns when fn returns
					mu.Unlock()
					return nil
				})
			})
			time.Sleep(time.Millisecond)
		}
		wg.Wait()
		sequence = strings.Join(seq, " ")
	})
	return sequence
}
