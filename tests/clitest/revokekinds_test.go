//go:build unix

package clitest

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/syncguard/syncguard-go/multilock"
	"github.com/syncguard/syncguard-go/rwlock"
	"github.com/syncguard/syncguard-go/semaphore"
	"github.com/syncguard/syncguard-go/syncguard"
)

// `syncguard revoke KEY` revokes every kind's holding of KEY: a semaphore
// permit, a read-write lock's shared lease, a set that has KEY (and, on
// another key, an exclusive lease); each holder finds its lease gone at
// its next extend. A holding of another key is left alone, and a second
// revoke exits 1.
func TestRevokeEveryKind(t *testing.T) {
	t.Parallel()
	d := kindsDB(t)
	db := openDB(t, d)
	ctx := ctxT(t)
	k, kx, other := key(t, "rk"), key(t, "rkx"), key(t, "rk-other")
	sem, err := semaphore.New(db, nil, 2)
	if err != nil {
		t.Fatal(err)
	}
	rw, err := rwlock.New(db, nil)
	if err != nil {
		t.Fatal(err)
	}
	ml, err := multilock.New(db, nil)
	if err != nil {
		t.Fatal(err)
	}
	take := func(l syncguard.LockBackend, key string) string {
		t.Helper()
		r, err := l.Acquire(ctx, key, time.Minute)
		if err != nil || !r.OK {
			t.Fatalf("acquire %s: %+v %v", key, r, err)
		}
		return r.LockID
	}
	permit := take(sem, k)
	shared := take(rw.Shared(), k)
	set := take(ml, multilock.Keys(k, other))
	excl := take(rw.Exclusive(), kx)
	untouched := take(sem, other)

	r := sg(t, d, "revoke", k, "--json")
	wantCode(t, r, 0)
	var out struct {
		Revoked  bool
		Holdings []struct {
			Kind string
			Keys []string
		}
	}
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || !out.Revoked {
		t.Fatalf("revoke --json: %+v (%v)\n%s", out, err, r)
	}
	var kinds []string
	for _, h := range out.Holdings {
		kinds = append(kinds, h.Kind)
	}
	slices.Sort(kinds)
	if !slices.Equal(kinds, []string{"permit", "set", "shared"}) {
		t.Errorf("revoked kinds %v, want permit, set, shared\n%s", kinds, r)
	}
	for name, c := range map[string]struct {
		l  syncguard.LockBackend
		id string
	}{"permit": {sem, permit}, "shared": {rw.Shared(), shared}, "set": {ml, set}} {
		if e, err := c.l.Extend(ctx, c.id, time.Minute); err != nil || e.OK {
			t.Errorf("the revoked %s extends: %+v %v", name, e, err)
		}
	}
	if e, err := sem.Extend(ctx, untouched, time.Minute); err != nil || !e.OK {
		t.Errorf("a permit of another key was revoked: %+v %v", e, err)
	}

	// Text, and an exclusive lease.
	r = sg(t, d, "revoke", kx)
	wantCode(t, r, 0)
	if !strings.Contains(r.stdout, "exclusive") {
		t.Errorf("revoke of an exclusive lease:\n%s", r)
	}
	if e, err := rw.Exclusive().Extend(ctx, excl, time.Minute); err != nil || e.OK {
		t.Errorf("the revoked exclusive lease extends: %+v %v", e, err)
	}
	r = sg(t, d, "revoke", k)
	wantCode(t, r, 1)
	if !strings.Contains(r.stdout, "nothing revoked") {
		t.Errorf("second revoke:\n%s", r)
	}
}
