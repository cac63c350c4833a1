package sgbench

import (
	"context"
	"os/exec"
	"testing"
	"time"
)

// The etcd peer's workers exclude each other (a session each: two
// Mutexes on one session would share a key), and a campaign waits for the
// leader's resignation. Skipped without an etcd binary (apt-get install
// etcd-server).
func TestEtcdPeerExcludes(t *testing.T) {
	if _, err := exec.LookPath("etcd"); err != nil {
		t.Skip("no etcd binary")
	}
	ctx := context.Background()
	srv, err := StartEtcd(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	sys, err := newEtcdSys(srv.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	defer sys.close()
	var ws [2]peerWorker
	for i := range ws {
		if ws[i], err = sys.worker(ctx, 5*time.Second); err != nil {
			t.Fatal(err)
		}
		defer ws[i].close()
	}
	unlock, err := ws[0].lock(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	// While the first holds the key, the second does not get it.
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	_, err = ws[1].lock(short, "k")
	cancel()
	if err == nil {
		t.Fatal("the second worker took the key while the first held it")
	}
	if err := unlock(ctx); err != nil {
		t.Fatal(err)
	}
	unlock2, err := ws[1].lock(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	unlock2(ctx) //nolint:errcheck

	resign, err := ws[0].campaign(ctx, "e")
	if err != nil {
		t.Fatal(err)
	}
	won := make(chan error, 1)
	go func() {
		r, err := ws[1].campaign(ctx, "e")
		if err == nil {
			err = r(ctx)
		}
		won <- err
	}()
	select {
	case err := <-won:
		t.Fatalf("a second leader while the first leads: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	if err := resign(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-won; err != nil {
		t.Fatal(err)
	}
}
