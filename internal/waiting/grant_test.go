package waiting

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
	"testing/synctest"
)

// grantFor builds a grant payload as release.sql does (GrantPayloadSQL).
func grantFor(lockID, fields string) string {
	sum := sha256.Sum256([]byte(lockID + ":" + fields))
	return Payload(lockID) + ":" + fields + ":" + hex.EncodeToString(sum[:16])
}

func TestParseGrant(t *testing.T) {
	const id = "AAAAAAAAAAAAAAAAAAAAAA"
	g, ok := ParseGrant(id, grantFor(id, "000000000000042:1700000000000:30000"))
	if !ok || g != (Grant{Fence: "000000000000042", NowMs: 1700000000000, TTLMs: 30000}) {
		t.Fatalf("rule: a grant made with the lockId verifies: %+v %v", g, ok)
	}
	for name, p := range map[string]string{
		"another lockId's mac":  grantFor("BBBBBBBBBBBBBBBBBBBBBB", "000000000000042:1700000000000:30000"),
		"a field changed":       strings.Replace(grantFor(id, "000000000000042:1700000000000:30000"), ":000000000000042:", ":000000000000043:", 1),
		"a plain wake-up":       Payload(id),
		"a forged mac":          Payload(id) + ":000000000000042:1700000000000:30000:00000000000000000000000000000000",
		"a zero ttl":            grantFor(id, "000000000000042:1700000000000:0"),
		"a field missing":       grantFor(id, "000000000000042:1700000000000"),
		"not a number":          grantFor(id, "000000000000042:x:30000"),
		"another waiter's name": "0123456789abcdef:" + grantFor(id, "000000000000042:1700000000000:30000")[17:],
	} {
		if _, ok := ParseGrant(id, p); ok {
			t.Errorf("rule: only a grant whose mac the lockId makes verifies; %s did (%q)", name, p)
		}
	}
}

// A grant notification routes like a plain wake-up (by its first field)
// and is kept for the waiter, once; a plain one after it leaves it.
func TestGrantNotificationIsKeptForItsWaiter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t)
		const id = "AAAAAAAAAAAAAAAAAAAAAA"
		a, b := w.waker.Expect("chan1", Payload(id)), w.waker.Expect("chan1", Payload("B"))
		a.Listen()
		signalled(a)
		signalled(b)
		grant := grantFor(id, "000000000000042:1700000000000:30000")
		w.conn().send("chan1", grant)
		if !signalled(a) || signalled(b) {
			t.Fatal("rule: a grant wakes only the waiter it names")
		}
		w.conn().send("chan1", Payload(id))
		signalled(a)
		if got := a.Grant(); got != grant {
			t.Errorf("rule: the grant is kept for its waiter: got %q", got)
		}
		if got := a.Grant(); got != "" {
			t.Errorf("rule: a grant is taken once: got %q", got)
		}
		w.conn().send("chan2", grant)
		synctest.Wait()
		if got := a.Grant(); got != "" {
			t.Errorf("rule: a grant on another key's channel is not kept: got %q", got)
		}
		w.waker.Wake(grant)
		if !signalled(a) || a.Grant() != grant {
			t.Error("rule: a local hand-off's grant is kept too")
		}
	})
}
