//go:build unix

package clitest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/syncguard/syncguard-go/election"
	"github.com/syncguard/syncguard-go/syncguard"
)

// `syncguard revoke KEY` forces a `syncguard run` out: run learns it at its
// next extend, stops its command and exits 76 (lock lost); the key goes to
// the process waiting for it, with a fence above the revoked one. A second
// revoke of a free key exits 1.
func TestRevokeRun(t *testing.T) {
	t.Parallel()
	d := dsn(t)
	b := backend(t, openDB(t, d), nil)
	dir := t.TempDir()
	k := key(t, "k")
	p := start(t, env(d), "run", "--key", k, "--ttl", "3s", "--grace", "2s", "--",
		"sh", "-c", fmt.Sprintf("echo ready > %s/ready; while :; do sleep 0.05; done", dir))
	waitFile(t, filepath.Join(dir, "ready"), 20*time.Second)
	held, err := b.LookupKey(ctxT(t), k)
	if err != nil || held == nil {
		t.Fatalf("run holds no lock: %v %v", held, err)
	}

	// A waiter, queued before the revoke.
	got := make(chan *syncguard.Lease, 1)
	go func() {
		l, err := syncguard.Lock(ctxT(t), b, k, &syncguard.LockOptions{TTL: time.Minute,
			Acquisition: syncguard.AcquisitionOptions{Timeout: time.Minute}})
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	time.Sleep(300 * time.Millisecond)

	r := sg(t, d, "revoke", k, "--json")
	wantCode(t, r, 0)
	var out struct {
		Revoked                bool
		Key, Fence, LockIDHash string
		Identity, KeyHash      string
		AcquiredAt, ExpiresAt  string
	}
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || !out.Revoked || out.Fence != string(held.Fence) ||
		out.LockIDHash != held.LockIDHash || out.Key != k || !strings.Contains(out.Identity, ":sh") {
		t.Fatalf("revoke --json: %+v (%v), want the run's holding %+v\n%s", out, err, held, r)
	}
	if strings.Contains(r.stdout, `"lockId"`) {
		t.Errorf("revoke printed a raw lockId: %s", r)
	}

	start := time.Now()
	rr := p.wait(t, 30*time.Second)
	wantCode(t, rr, 76)
	if !strings.Contains(rr.stderr, "LockLost") {
		t.Errorf("run after the revoke: %s", rr)
	}
	t.Logf("run exited %v after the revoke", time.Since(start))

	l := <-got
	if l == nil {
		t.FailNow()
	}
	if l.Fence() <= held.Fence {
		t.Errorf("the waiter's fence %s is not above the revoked %s", l.Fence(), held.Fence)
	}
	l.Close()

	r = sg(t, d, "revoke", k)
	wantCode(t, r, 1)
	if !strings.Contains(r.stdout, "is not held: nothing revoked") {
		t.Errorf("revoke of a free key: %s", r)
	}
}

// Revoke through the API deposes an elected leader: its term's context
// ends with ErrLockLost at its next extend, and the queued candidate is
// elected with a higher term. Revoke ends only the holding it finds.
func TestRevokeLeader(t *testing.T) {
	t.Parallel()
	d := dsn(t)
	k := key(t, "election")
	campaign := func(name string) (*election.Term, error) {
		e, err := election.New(backend(t, openDB(t, d), nil), k, &election.Options{Identity: name, TTL: 3 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		return e.Campaign(ctxT(t))
	}
	first, err := campaign("first")
	if err != nil {
		t.Fatal(err)
	}
	defer first.Resign(context.Background())
	second := make(chan *election.Term, 1)
	go func() {
		term, err := campaign("second")
		if err != nil {
			t.Error(err)
		}
		second <- term
	}()
	time.Sleep(300 * time.Millisecond)

	b := backend(t, openDB(t, d), nil)
	h, err := b.Revoke(ctxT(t), k)
	if err != nil || h == nil || h.Identity != "first" || h.Fence != first.Fence() {
		t.Fatalf("Revoke: %+v %v; want the first leader's holding (term %s)", h, err, first.Fence())
	}
	start := time.Now()
	select {
	case <-first.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the revoked leader's term did not end")
	}
	if !errors.Is(first.Err(), syncguard.ErrLockLost) || !errors.Is(context.Cause(first.Context()), syncguard.ErrLockLost) {
		t.Errorf("the revoked term ended with %v; want ErrLockLost", first.Err())
	}
	t.Logf("the revoked term ended %v after the revoke", time.Since(start))
	next := <-second
	if next == nil {
		t.FailNow()
	}
	defer next.Resign(context.Background())
	if next.Fence() <= first.Fence() {
		t.Errorf("the next term %s is not above the revoked %s", next.Fence(), first.Fence())
	}
	if l, err := b.LookupKey(ctxT(t), k); err != nil || l == nil || l.Identity != "second" {
		t.Errorf("the leader after the revoke: %+v %v", l, err)
	}
}

// `ls --keys` shows raw keys and only the hashes of lockIds.
func TestLsKeys(t *testing.T) {
	t.Parallel()
	d := dsn(t)
	_, k, res := holdKey(t, d)
	r := sg(t, d, "ls", "--keys", "--limit", "0")
	wantCode(t, r, 0)
	if !strings.Contains(r.stdout, k) || strings.Contains(r.stdout, res.LockID) {
		t.Errorf("ls --keys: want the raw key, never the lockId:\n%s", r)
	}
	r = sg(t, d, "ls", "--keys", "--limit", "0", "--json")
	wantCode(t, r, 0)
	if !strings.Contains(r.stdout, `"key": "`+k+`"`) || strings.Contains(r.stdout, `"lockId"`) || strings.Contains(r.stdout, res.LockID) {
		t.Errorf("ls --keys --json: want key, no lockId:\n%s", r)
	}
	r = sg(t, d, "ls", "--limit", "0")
	if strings.Contains(r.stdout, k) || !strings.Contains(r.stdout, "key#"+syncguard.HashKey(k)) {
		t.Errorf("ls: want the keys' hashes by default:\n%s", r)
	}
}
