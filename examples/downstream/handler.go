// Package downstream is code as a service using syncguard writes it: a
// handler that charges an invoice once, under its lock. Its test
// (handler_test.go) is a unit test as such a service would write one, with
// syncguardtest and no database. docs/testing.md shows both.
package downstream

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/syncguard/syncguard-go/syncguard"
)

// Payments is what the handler writes to: it accepts a charge only with a
// fence greater than the last one it saw for the invoice.
type Payments interface {
	Charge(ctx context.Context, invoiceID string, fence syncguard.Fence) error
}

// ErrInProgress: another instance is charging this invoice right now.
var ErrInProgress = errors.New("invoice is being charged elsewhere")

// ChargeHandler charges invoices, one instance at a time per invoice.
type ChargeHandler struct {
	Locks    syncguard.Locker // a *syncguard.Backend in production
	Payments Payments
}

// Handle charges invoiceID under the lock "charge:<id>".
func (h *ChargeHandler) Handle(ctx context.Context, invoiceID string) error {
	err := syncguard.WithLock(ctx, h.Locks, "charge:"+invoiceID, func(ctx context.Context, lease *syncguard.Lease) error {
		return h.Payments.Charge(ctx, invoiceID, lease.Fence())
	}, &syncguard.LockOptions{TTL: 30 * time.Second, Acquisition: syncguard.AcquisitionOptions{Timeout: time.Second}})
	switch {
	case errors.Is(err, syncguard.ErrServiceUnavailable), errors.Is(err, syncguard.ErrNetworkTimeout):
		// The database was unreachable for the whole wait (no attempt
		// got an answer: the outage's code): not "in progress".
		return fmt.Errorf("charging %s: %w", invoiceID, err)
	case errors.Is(err, syncguard.ErrAcquisitionTimeout):
		return ErrInProgress
	case err != nil:
		return fmt.Errorf("charging %s: %w", invoiceID, err)
	}
	return nil
}
