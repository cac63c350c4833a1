package otelsyncguard

import (
	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
)

// The attribute keys of this package's metrics and spans, for filtering
// and grouping (the Prometheus exporter writes them with "_" for ".":
// syncguard_lock_label). The semantic conventions' keys are used where one
// exists: db.system.name (postgresql, on the spans of backend
// operations), db.operation.name, error.type (the syncguard error code,
// or _OTHER) and exception.message, from go.opentelemetry.io/otel/semconv.
// docs/observability.md lists which metric and span carries which.
const (
	// AttrOutcome is what an operation, a wait or a holding came to:
	// acquired, contended or error for an acquire attempt; ok, failed or
	// error for an extend or release; locked or free for IsLocked; found
	// or not-found for a lookup; acquired, timeout, cancelled or error for
	// a wait (syncguard.wait.duration, the spans of Lock and WithLock);
	// released or lost for a holding (syncguard.hold.duration).
	AttrOutcome = attribute.Key("syncguard.outcome")
	// AttrReason is why an extend or release failed (outcome failed):
	// expired or not-found (syncguard.ReasonExpired, ReasonNotFound).
	AttrReason = attribute.Key("syncguard.reason")
	// AttrLossReason is why a lease lost its lock: expired (an extend, or
	// the release, found it expired), not_extended (no extend was
	// confirmed before its guaranteed lifetime ran out) or gone (released
	// through its lockId elsewhere, deleted or taken over). On
	// syncguard.losses, and on the span and the event "lost" of Lock and
	// WithLock.
	AttrLossReason = attribute.Key("syncguard.loss.reason")
	// AttrLockLabel is the label WithKeyLabel gives a key; absent without
	// WithKeyLabel (keys are never recorded).
	AttrLockLabel = attribute.Key("syncguard.lock.label")
	// AttrAttempts is the number of acquire attempts of a Lock or WithLock
	// span, and of its event "acquired".
	AttrAttempts = attribute.Key("syncguard.attempts")
	// AttrWaitDuration is the time in seconds a Lock or WithLock span
	// waited for its lock, on the span when the wait gave up and on the
	// event "acquired" when it did not.
	AttrWaitDuration = attribute.Key("syncguard.wait.duration")
	// AttrHoldOutcome is how the holding of a Lock or WithLock span ended:
	// released or lost.
	AttrHoldOutcome = attribute.Key("syncguard.hold.outcome")
	// AttrElectionName is the name of an election on ElectionMetrics'
	// metrics (NewElectionMetrics' name).
	AttrElectionName = attribute.Key("syncguard.election.name")
)

// The semantic conventions' attributes.
var (
	dbSystem       = semconv.DBSystemNamePostgreSQL
	attrOperation  = semconv.DBOperationNameKey
	attrErrorType  = semconv.ErrorTypeKey
	attrExcMsg     = semconv.ExceptionMessageKey
	errorTypeOther = semconv.ErrorTypeOther.Value.AsString() // "_OTHER": an error without a syncguard code
)
