package waiting

import (
	"context"
	"errors"
	"testing"
)

// TestPlaceLeave: one subtest per rule of Place.Leave.
func TestPlaceLeave(t *testing.T) {
	type call struct{ ok, left bool }
	run := func(t *testing.T, joined, unknown bool, answers []call, fail error) (releases int, background bool, err error) {
		t.Helper()
		p := Place{LockID: "lock"}
		if joined {
			w := New(Config{NoListener: "a test: polling"})
			defer w.Close()
			p.Join(w, "channel")
		}
		p.Unknown.Store(unknown)
		err = p.Leave(context.Background(), func(context.Context) (bool, bool, error) {
			a := answers[min(releases, len(answers)-1)]
			releases++
			return a.ok, a.left, fail
		}, func() { background = true })
		return releases, background, err
	}
	t.Run("NotJoinedNothingToLeave", func(t *testing.T) {
		if n, bg, err := run(t, false, true, []call{{}}, nil); n != 0 || bg || err != nil {
			t.Fatalf("a waiter that never queued: %d releases, background %v, %v; want none", n, bg, err)
		}
	})
	t.Run("OneReleaseWhenItFindsTheRow", func(t *testing.T) {
		if n, bg, _ := run(t, true, false, []call{{ok: false, left: true}}, nil); n != 1 || bg {
			t.Fatalf("%d releases, background %v; want 1, none", n, bg)
		}
	})
	t.Run("SecondReleaseWhenItFoundNeither", func(t *testing.T) {
		if n, _, _ := run(t, true, false, []call{{ok: false, left: false}, {ok: true}}, nil); n != 2 {
			t.Fatalf("%d releases; want 2: a hand-off may have been committing", n)
		}
	})
	t.Run("BackgroundAfterAFailure", func(t *testing.T) {
		boom := errors.New("boom")
		if _, bg, err := run(t, true, false, []call{{}}, boom); !bg || !errors.Is(err, boom) {
			t.Fatalf("background %v, %v; want the background release and the error", bg, err)
		}
	})
	t.Run("BackgroundAfterAnUnknownOutcome", func(t *testing.T) {
		if _, bg, _ := run(t, true, true, []call{{ok: false, left: true}}, nil); !bg {
			t.Fatal("an attempt of unknown outcome and no lock found: want the background release")
		}
		if _, bg, _ := run(t, true, true, []call{{ok: true, left: true}}, nil); bg {
			t.Fatal("the lock was released: want no background release")
		}
	})
	t.Run("NoWakeupAfterClose", func(t *testing.T) {
		w := New(Config{NoListener: "a test: polling"})
		defer w.Close()
		p := Place{LockID: "lock"}
		p.Close()
		p.Join(w, "channel")
		if h := p.Hint(0); h.Wake != nil || p.Close() {
			t.Fatal("a place closed before its attempt joined registered a wake-up: an attempt still running after Leave must not join")
		}
	})
}
