package downstream

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/syncguard/syncguard-go/syncguard"
	"github.com/syncguard/syncguard-go/syncguardtest"
)

// fakePayments records charges and refuses a stale fence, as the real
// payment store's conditional UPDATE does.
type fakePayments struct{ fences map[string]syncguard.Fence }

func (p *fakePayments) Charge(_ context.Context, id string, fence syncguard.Fence) error {
	if fence <= p.fences[id] {
		return errors.New("stale fence")
	}
	p.fences[id] = fence
	return nil
}

// TestChargeHandler runs in a testing/synctest bubble: time is fake
// there, so the handler's 1 s wait for a held lock passes at once, and the
// backend's clock (time.Now in the bubble) moves with it.
func TestChargeHandler(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		locks := syncguardtest.New()
		pay := &fakePayments{fences: map[string]syncguard.Fence{}}
		h := &ChargeHandler{Locks: locks, Payments: pay}

		// Charges under the lock, with a fence that grows, and releases it.
		for range 2 {
			if err := h.Handle(ctx, "inv-1"); err != nil {
				t.Fatal(err)
			}
		}
		if pay.fences["inv-1"] != "000000000000002" {
			t.Errorf("fence after two charges: %s", pay.fences["inv-1"])
		}
		if locked, _ := locks.IsLocked(ctx, "charge:inv-1"); locked {
			t.Error("the handler left the lock held")
		}

		// Another instance holds the lock: the handler waits its 1 s (of
		// fake time) and gives up with ErrInProgress.
		if r, err := locks.Acquire(ctx, "charge:inv-2", time.Minute); err != nil || !r.OK {
			t.Fatal(r, err)
		}
		start := time.Now()
		if err := h.Handle(ctx, "inv-2"); !errors.Is(err, ErrInProgress) {
			t.Errorf("while held elsewhere: %v", err)
		}
		if waited := time.Since(start); waited < time.Second {
			t.Errorf("gave up after %v, before its 1 s timeout", waited)
		}
		// That holder dies; once its lock expires the handler gets through.
		time.Sleep(time.Minute + 2*time.Second)
		if err := h.Handle(ctx, "inv-2"); err != nil {
			t.Errorf("after the other holder's lock expired: %v", err)
		}

		// The database is down for the whole wait: the handler reports it
		// (no attempt got an answer: the wait ends with the outage's
		// code), and nothing is charged.
		locks.Fail(syncguardtest.OpAcquire, syncguard.ErrServiceUnavailable, -1)
		if err := h.Handle(ctx, "inv-3"); !errors.Is(err, syncguard.ErrServiceUnavailable) {
			t.Errorf("with the database down: %v", err)
		}
		if _, charged := pay.fences["inv-3"]; charged {
			t.Error("charged without the lock")
		}
		// A blip is ridden out within the wait.
		locks.Fail(syncguardtest.OpAcquire, syncguard.ErrServiceUnavailable, 1)
		if err := h.Handle(ctx, "inv-3"); err != nil {
			t.Errorf("after a one-attempt outage: %v", err)
		}
	})
}
