package itest_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/syncguard/syncguard-go/internal/rules"
	"github.com/syncguard/syncguard-go/syncguard"
	"github.com/syncguard/syncguard-go/txguard"
)

// TestTxGuardHoldFunctionTakesTheKey (issue 41): the SQL function
// "<table>_hold"(lockId, key) checks the lease on the key it is given, as
// Guard.Hold does: a live lockId of another key is refused (SG001) and
// writes nothing, so that lease's fence never lands in this key's row.
// The key is made a storage key in SQL as in Go: a long key (hashed), a
// key in another Unicode normalization form. Setup drops the former
// function, which took the lockId alone.
func TestTxGuardHoldFunctionTakesTheKey(t *testing.T) {
	e := newTGEnv(t)
	a := e.acquire("tg:a")
	b := e.acquire("tg:b")
	af, _ := a.Fence.Int64()
	e.exec(`INSERT INTO ` + e.res + ` (id, v, fence) VALUES (1, 'a', 0)`)

	// B's live lockId on A's row: refused.
	_, err := e.db.ExecContext(e.ctx, `UPDATE `+e.res+` SET v = 'b', fence = `+e.hold+`($1, $2) WHERE id = 1`, b.LockID, "tg:a")
	if err = e.g.Classify(e.ctx, err); !errors.Is(err, syncguard.ErrLockLost) || !strings.Contains(err.Error(), "another key") {
		t.Fatalf("the SQL function with a live lockId of another key: %v, want ErrLockLost (SG001, another key)", err)
	}
	// A's own: passes and writes A's fence.
	e.exec(`UPDATE `+e.res+` SET v = 'a', fence = `+e.hold+`($1, $2) WHERE id = 1`, a.LockID, "tg:a")
	var got int64
	if err := e.db.QueryRowContext(e.ctx, `SELECT fence FROM `+e.res+` WHERE id = 1`).Scan(&got); err != nil || got != af {
		t.Fatalf("the row's fence: %d, %v; want A's, %d", got, err, af)
	}

	// The key as Go derives it: NFC-normalized, the longest key (a storage
	// key is hashed only past StorageKeyLimit, beyond MaxKeyBytes).
	long := "tg:" + strings.Repeat("\u00e9", (rules.MaxKeyBytes-3)/2)
	nfc, nfd := "tg:caf\u00e9", "tg:cafe\u0301"
	for _, k := range []struct{ acquire, hold string }{{long, long}, {nfc, nfd}, {nfd, nfc}} {
		r := e.acquire(k.acquire)
		var fence int64
		if err := e.db.QueryRowContext(e.ctx, `SELECT `+e.hold+`($1, $2)`, r.LockID, k.hold).Scan(&fence); err != nil {
			t.Fatalf("the SQL function on key %.20q... (acquired as %.20q...): %v", k.hold, k.acquire, err)
		}
		if want, _ := r.Fence.Int64(); fence != want {
			t.Fatalf("fence %d, want %d", fence, want)
		}
		if _, err := e.b.Release(e.ctx, r.LockID); err != nil {
			t.Fatal(err)
		}
	}

	// The former signature is gone, also after a Setup that finds it.
	fn := strings.TrimSuffix(e.hold, `"`) + `"`
	e.exec(`CREATE OR REPLACE FUNCTION ` + fn + `(p_lock_id text) RETURNS bigint LANGUAGE sql AS 'SELECT 1::bigint'`)
	if err := txguard.Setup(e.ctx, e.db, &e.cfg); err != nil {
		t.Fatal(err)
	}
	var old *string
	if err := e.db.QueryRowContext(e.ctx, `SELECT to_regprocedure($1)::text`, fn+`(text)`).Scan(&old); err != nil || old != nil {
		t.Fatalf("the former function %s(text) after Setup: %v, %v; want it dropped", fn, old, err)
	}
}
