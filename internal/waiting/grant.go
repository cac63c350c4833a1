package waiting

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
)

// A grant notification is the wake-up of a waiter that a release handed
// the key to, carrying what the waiter's confirming attempt would read:
//
//	payload ":" fence ":" now_ms ":" ttl_ms ":" mac
//
// payload is Payload(lockID) (what routes it), fence the lock row's fence
// text, now_ms the release's server time (the lock's acquired_at_ms),
// ttl_ms the lock's TTL, and mac the first 32 hex digits of
// sha256(lockID ":" fence ":" now_ms ":" ttl_ms). The lockId is the
// waiter's secret: it is in the lock and waiters tables only, which only
// roles with table privileges read, so a role that can merely NOTIFY
// cannot make a mac that verifies (one that forges anyway costs the
// waiter one attempt, as any forged hint). A notification is delivered
// only after its transaction committed, so a grant that verifies was
// committed: the waiter holds the key without a round trip.

// GrantPayloadSQL is a grant notification's payload in SQL, over the
// expressions of the lockId, the fence text, the release's now_ms and the
// TTL in ms.
func GrantPayloadSQL(lockID, fence, nowMs, ttlMs string) string {
	fields := fmt.Sprintf("%s || ':' || (%s)::text || ':' || (%s)::text", fence, nowMs, ttlMs)
	return fmt.Sprintf("%s || ':' || %s || ':' || left(encode(sha256(convert_to(%s || ':' || %s, 'UTF8')), 'hex'), 32)",
		PayloadSQL(lockID), fields, lockID, fields)
}

// Grant is a verified grant notification.
type Grant struct {
	Fence string // the lock row's fence text
	NowMs int64  // the release's server time: the lock's acquired_at_ms
	TTLMs int64  // its expiry is NowMs + TTLMs
}

// ParseGrant verifies payload as a grant to lockID; ok is false for
// anything else (a plain wake-up, another waiter's, a forgery).
func ParseGrant(lockID, payload string) (g Grant, ok bool) {
	parts := strings.Split(payload, ":")
	if len(parts) != 5 || parts[0] != Payload(lockID) {
		return Grant{}, false
	}
	now, err1 := strconv.ParseInt(parts[2], 10, 64)
	ttl, err2 := strconv.ParseInt(parts[3], 10, 64)
	if err1 != nil || err2 != nil || ttl <= 0 || parts[1] == "" {
		return Grant{}, false
	}
	sum := sha256.Sum256([]byte(lockID + ":" + strings.Join(parts[1:4], ":")))
	if hex.EncodeToString(sum[:16]) != parts[4] {
		return Grant{}, false
	}
	return Grant{Fence: parts[1], NowMs: now, TTLMs: ttl}, true
}
