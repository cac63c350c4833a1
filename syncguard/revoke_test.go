package syncguard_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/syncguard/syncguard-go/syncguard"
	"github.com/syncguard/syncguard-go/syncguardtest"
)

// Revoke ends the holding it finds: the holder's lease ends as lost at its
// next automatic extend, and the key goes to its waiter with a larger
// fence. (tests/clitest runs the same against PostgreSQL.)
func TestRevokeEndsTheHolder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		b := syncguardtest.New()
		if h, err := b.Revoke(ctx, "jobs:revoke"); h != nil || err != nil {
			t.Fatalf("a free key: %v, %v; want nil, nil", h, err)
		}
		lease, err := syncguard.Lock(ctx, b, "jobs:revoke", &syncguard.LockOptions{TTL: 3 * time.Second, AutoExtend: true})
		if err != nil {
			t.Fatal(err)
		}
		defer lease.Close()
		got := make(chan *syncguard.Lease, 1)
		go func() {
			next, err := syncguard.Lock(ctx, b, "jobs:revoke", &syncguard.LockOptions{Acquisition: syncguard.AcquisitionOptions{Timeout: time.Minute}})
			if err != nil {
				t.Error(err)
			}
			got <- next
		}()
		synctest.Wait() // the waiter waits
		h, err := b.Revoke(ctx, "jobs:revoke")
		if err != nil || h == nil || h.Fence != lease.Fence() || h.LockIDHash != syncguard.HashKey(lease.LockID()) {
			t.Fatalf("Revoke: %+v, %v; want the holding of fence %s", h, err, lease.Fence())
		}
		next := <-got
		if next == nil {
			return
		}
		defer next.Close()
		if next.Fence() <= lease.Fence() {
			t.Errorf("the next fence %s is not above the revoked %s", next.Fence(), lease.Fence())
		}
		start := time.Now()
		<-lease.Done()
		if !errors.Is(lease.Err(), syncguard.ErrLockLost) || time.Since(start) > time.Second {
			t.Errorf("the revoked lease: %v after %v; want ErrLockLost within a third of its TTL", lease.Err(), time.Since(start))
		}
		if h, err := b.Revoke(ctx, "jobs:revoke"); err != nil || h == nil || h.Fence != next.Fence() {
			t.Errorf("revoking the next holder: %+v, %v", h, err)
		}
	})
}

// An outage of the automatic extends logs one warning as it starts and one
// line as it ends, whatever the number of failed retries: "works again",
// or "gave up" when the lease is lost.
func TestAutoExtendOutageLogsOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf syncBuffer
		b := syncguardtest.New()
		opts := &syncguard.LockOptions{TTL: 10 * time.Second, AutoExtend: true,
			Logger: slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))}
		lease, err := syncguard.Lock(context.Background(), b, "jobs:outage", opts)
		if err != nil {
			t.Fatal(err)
		}
		b.Fail(syncguardtest.OpExtend, syncguard.ErrServiceUnavailable, 4) // 4 retries, 1 s apart
		time.Sleep(10 * time.Second)
		if lease.Err() != nil {
			t.Fatalf("the lease ended: %v", lease.Err())
		}
		lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
		if len(lines) != 2 || !strings.Contains(lines[0], "level=WARN") || !strings.Contains(lines[0], "automatic lock extension failed") ||
			!strings.Contains(lines[0], "lostIn=") || !strings.Contains(lines[1], "level=INFO") || !strings.Contains(lines[1], "works again") ||
			!strings.Contains(lines[1], "outage=4s") {
			t.Errorf("an outage of 4 failed extends logged:\n%s\nwant one warning and one line at its end", buf.String())
		}

		buf.Reset()
		b.Fail(syncguardtest.OpExtend, syncguard.ErrServiceUnavailable, -1)
		<-lease.Done()
		synctest.Wait()
		lines = strings.Split(strings.TrimSpace(buf.String()), "\n")
		if len(lines) != 2 || !strings.Contains(lines[0], "automatic lock extension failed") ||
			!strings.Contains(lines[1], "level=WARN") || !strings.Contains(lines[1], "gave up: the lock is lost") {
			t.Errorf("an outage that lost the lock logged:\n%s\nwant one warning and one line at its end", buf.String())
		}
		lease.Close()
	})
}
