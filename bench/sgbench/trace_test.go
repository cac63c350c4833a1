package sgbench

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/syncguard/syncguard-go/internal/kit"
	"github.com/syncguard/syncguard-go/syncguard"
	"github.com/syncguard/syncguard-go/syncguardtest"
)

// A traced wait records each attempt (the failed one with its pace) and
// the wait's end, and the wrapper keeps the Locker a Queuer: the waiter
// keeps its place and is handed the key at the release.
func TestTraceRecordsAttemptsAndWaits(t *testing.T) {
	ctx := context.Background()
	b := syncguardtest.New()
	path := filepath.Join(t.TempDir(), "trace.jsonl")
	tr := NewTracer(path)
	l := tr.Wrap(b)
	if _, ok := l.(kit.Queuer); !ok {
		t.Fatal("the traced Locker is not a Queuer")
	}
	held, err := b.Acquire(ctx, "k", time.Minute)
	if err != nil || !held.OK {
		t.Fatalf("holder: %+v %v", held, err)
	}
	go func() {
		time.Sleep(50 * time.Millisecond)
		b.Release(ctx, held.LockID) //nolint:errcheck
	}()
	lease, err := syncguard.Lock(ctx, l, "k", &syncguard.LockOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	lease.Close()
	if err := tr.Flush(); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var attempts, failed, waits int
	var okAttempt bool
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var r map[string]any
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		switch r["ev"] {
		case "attempt":
			attempts++
			if r["ok"] == true {
				okAttempt = true
				if r["fence"] == nil {
					t.Errorf("a successful attempt without its fence: %v", r)
				}
			} else {
				failed++
				if _, ok := r["pace_ms"]; !ok {
					t.Errorf("a failed attempt without its pace: %v", r)
				}
			}
		case "wait":
			waits++
			if r["ok"] != true || r["attempts"] != float64(attempts) {
				t.Errorf("wait record %v after %d attempts", r, attempts)
			}
		}
	}
	if failed == 0 || !okAttempt || waits != 1 {
		t.Fatalf("attempts %d (failed %d, ok %v), waits %d", attempts, failed, okAttempt, waits)
	}
}
