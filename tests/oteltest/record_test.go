package oteltest

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/syncguard/syncguard-go/otelsyncguard"
	"github.com/syncguard/syncguard-go/syncguard"
	"github.com/syncguard/syncguard-go/syncguardtest"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
)

// Every backend operation's span (name, kind, status, every attribute,
// events) and every metric point (attributes, count) is exactly what
// docs/observability.md lists: a change to how they are recorded must not
// change what is recorded. Without options, and with WithAttributes and
// WithKeyLabel.
func TestWhatEachOperationRecords(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []otelsyncguard.Option
		// db and label are the extra attributes of spans and points.
		db, label string
	}{
		{name: "plain"},
		{
			name: "attributes and label",
			opts: []otelsyncguard.Option{
				otelsyncguard.WithAttributes(attributeDB),
				otelsyncguard.WithKeyLabel(func(key string) string {
					job, _, _ := strings.Cut(key, ":")
					return job
				}),
			},
			db: "db.namespace=orders", label: "syncguard.lock.label=jobs",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx := context.Background()
				locks := syncguardtest.New()
				r := newRig(t, locks, tc.opts...)
				must := func(err error) {
					t.Helper()
					if err != nil {
						t.Fatal(err)
					}
				}
				// acquired, then contended, then an error.
				a, err := r.Acquire(ctx, "jobs:a", time.Minute)
				must(err)
				must(locks.Contend("jobs:a", 1))
				if c, err := r.Acquire(ctx, "jobs:a", time.Minute); err != nil || c.OK {
					t.Fatalf("contended acquire = %+v, %v", c, err)
				}
				locks.Fail(syncguardtest.OpAcquire, syncguard.ErrServiceUnavailable, 1)
				if _, err := r.Acquire(ctx, "jobs:b", time.Minute); err == nil {
					t.Fatal("acquire with an injected failure succeeded")
				}
				// extend ok, lookups found, isLocked locked.
				_, err = r.Extend(ctx, a.LockID, time.Minute)
				must(err)
				_, err = r.IsLocked(ctx, "jobs:a")
				must(err)
				_, err = r.LookupKey(ctx, "jobs:a")
				must(err)
				_, err = r.LookupID(ctx, a.LockID)
				must(err)
				// release ok; then failed: not-found (gone), expired.
				_, err = r.Release(ctx, a.LockID)
				must(err)
				_, err = r.Release(ctx, a.LockID)
				must(err)
				b, err := r.Acquire(ctx, "jobs:b", time.Minute)
				must(err)
				locks.Expire(b.LockID)
				_, err = r.Extend(ctx, b.LockID, time.Minute)
				must(err)
				_, err = r.Release(ctx, b.LockID)
				must(err)
				// free, not found; errors of extend and release.
				_, err = r.IsLocked(ctx, "jobs:a")
				must(err)
				_, err = r.LookupKey(ctx, "jobs:a")
				must(err)
				locks.Fail(syncguardtest.OpExtend, syncguard.ErrNetworkTimeout, 1)
				if _, err := r.Extend(ctx, b.LockID, time.Minute); err == nil {
					t.Fatal("extend with an injected failure succeeded")
				}
				locks.Fail(syncguardtest.OpRelease, syncguard.ErrServiceUnavailable, 1)
				if _, err := r.Release(ctx, b.LockID); err == nil {
					t.Fatal("release with an injected failure succeeded")
				}
				synctest.Wait()

				with := func(attrs ...string) string {
					return strings.Join(sortedCopy(slices.DeleteFunc(append(attrs, tc.db), func(s string) bool { return s == "" })), ",")
				}
				keyOp := func(name string, attrs ...string) string {
					return with(append(attrs, "db.operation.name="+name, "db.system.name=postgresql", tc.label)...)
				}
				idOp := func(name string, attrs ...string) string {
					return with(append(attrs, "db.operation.name="+name, "db.system.name=postgresql")...)
				}
				const exc = "exception{exception.message,exception.type}" // RecordError's event
				wantSpans := []string{
					"syncguard.acquire client Unset [" + keyOp("acquire", "syncguard.outcome=acquired") + "] []",
					"syncguard.acquire client Unset [" + keyOp("acquire", "syncguard.outcome=contended") + "] []",
					"syncguard.acquire client Error:ServiceUnavailable [" + keyOp("acquire", "syncguard.outcome=error", "error.type=ServiceUnavailable") + "] [" + exc + "]",
					"syncguard.extend client Unset [" + idOp("extend", "syncguard.outcome=ok") + "] []",
					"syncguard.isLocked client Unset [" + keyOp("isLocked", "syncguard.outcome=locked") + "] []",
					"syncguard.lookup client Unset [" + keyOp("lookup", "syncguard.outcome=found") + "] []",
					"syncguard.lookup client Unset [" + idOp("lookup", "syncguard.outcome=found") + "] []",
					"syncguard.release client Unset [" + idOp("release", "syncguard.outcome=ok") + "] []",
					"syncguard.release client Unset [" + idOp("release", "syncguard.outcome=failed", "syncguard.reason=not-found") + "] []",
					"syncguard.acquire client Unset [" + keyOp("acquire", "syncguard.outcome=acquired") + "] []",
					"syncguard.extend client Unset [" + idOp("extend", "syncguard.outcome=failed", "syncguard.reason=expired") + "] []",
					"syncguard.release client Unset [" + idOp("release", "syncguard.outcome=failed", "syncguard.reason=expired") + "] []",
					"syncguard.isLocked client Unset [" + keyOp("isLocked", "syncguard.outcome=free") + "] []",
					"syncguard.lookup client Unset [" + keyOp("lookup", "syncguard.outcome=not-found") + "] []",
					"syncguard.extend client Error:NetworkTimeout [" + idOp("extend", "syncguard.outcome=error", "error.type=NetworkTimeout") + "] [" + exc + "]",
					"syncguard.release client Error:ServiceUnavailable [" + idOp("release", "syncguard.outcome=error", "error.type=ServiceUnavailable") + "] [" + exc + "]",
				}
				var gotSpans []string
				for _, s := range r.spans.Ended() {
					gotSpans = append(gotSpans, renderSpan(s))
				}
				if g, w := strings.Join(gotSpans, "\n"), strings.Join(wantSpans, "\n"); g != w {
					t.Errorf("spans:\n%s\nwant:\n%s", g, w)
				}

				// Acquires by key carry the label; extends and releases
				// name only a lockId.
				key := func(attrs ...string) string { return with(append(attrs, tc.label)...) }
				id := func(attrs ...string) string { return with(attrs...) }
				wantPoints := []string{
					"syncguard.acquire.attempts{" + key("syncguard.outcome=acquired") + "} 2",
					"syncguard.acquire.attempts{" + key("syncguard.outcome=contended") + "} 1",
					"syncguard.acquire.attempts{" + key("error.type=ServiceUnavailable", "syncguard.outcome=error") + "} 1",
					"syncguard.acquire.duration{" + key("syncguard.outcome=acquired") + "} count=2",
					"syncguard.acquire.duration{" + key("syncguard.outcome=contended") + "} count=1",
					"syncguard.acquire.duration{" + key("error.type=ServiceUnavailable", "syncguard.outcome=error") + "} count=1",
					"syncguard.extends{" + id("syncguard.outcome=ok") + "} 1",
					"syncguard.extends{" + id("syncguard.outcome=failed", "syncguard.reason=expired") + "} 1",
					"syncguard.extends{" + id("error.type=NetworkTimeout", "syncguard.outcome=error") + "} 1",
					"syncguard.releases{" + id("syncguard.outcome=ok") + "} 1",
					"syncguard.releases{" + id("syncguard.outcome=failed", "syncguard.reason=not-found") + "} 1",
					"syncguard.releases{" + id("syncguard.outcome=failed", "syncguard.reason=expired") + "} 1",
					"syncguard.releases{" + id("error.type=ServiceUnavailable", "syncguard.outcome=error") + "} 1",
					"syncguard.telemetry.dropped{" + id() + "} 0",
				}
				if g, w := renderPoints(r.collect(t)), wantPoints; strings.Join(g, "\n") != strings.Join(sortedCopy(w), "\n") {
					t.Errorf("metric points:\n%s\nwant:\n%s", strings.Join(g, "\n"), strings.Join(sortedCopy(w), "\n"))
				}
			})
		})
	}
}

// renderSpan is "name kind status [sorted attributes] [events{attribute
// keys}]".
func renderSpan(s sdktrace.ReadOnlySpan) string {
	var attrs []string
	for _, a := range s.Attributes() {
		attrs = append(attrs, string(a.Key)+"="+a.Value.Emit())
	}
	sort.Strings(attrs)
	var events []string
	for _, e := range s.Events() {
		var keys []string
		for _, a := range e.Attributes {
			keys = append(keys, string(a.Key))
		}
		sort.Strings(keys)
		events = append(events, e.Name+"{"+strings.Join(keys, ",")+"}")
	}
	status := s.Status().Code.String()
	if s.Status().Description != "" {
		status += ":" + s.Status().Description
	}
	return fmt.Sprintf("%s %s %s [%s] [%s]", s.Name(), s.SpanKind(), status, strings.Join(attrs, ","), strings.Join(events, ","))
}

// renderPoints lists every point as "name{attributes} value" (sums) or
// "name{attributes} count=n" (histograms), sorted.
func renderPoints(c collected) []string {
	var out []string
	for _, sm := range c.rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					out = append(out, fmt.Sprintf("%s{%s} %d", m.Name, attrString(p.Attributes), p.Value))
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					out = append(out, fmt.Sprintf("%s{%s} %d", m.Name, attrString(p.Attributes), p.Value))
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					out = append(out, fmt.Sprintf("%s{%s} count=%d", m.Name, attrString(p.Attributes), p.Count))
				}
			default:
				out = append(out, fmt.Sprintf("%s: unexpected %T", m.Name, m.Data))
			}
		}
	}
	sort.Strings(out)
	return out
}

// The spans of the Backend's Lock and WithLock: kind internal, no
// db.* attributes of their own, WithAttributes and the label.
func TestWhatLockAndWithLockRecord(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		r := newRig(t, syncguardtest.New(), otelsyncguard.WithAttributes(attributeDB),
			otelsyncguard.WithKeyLabel(func(key string) string {
				job, _, _ := strings.Cut(key, ":")
				return job
			}))
		if err := r.WithLock(ctx, "jobs:a", nop, nil); err != nil {
			t.Fatal(err)
		}
		lease, err := r.Lock(ctx, "jobs:a", nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := lease.Release(ctx); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		const attrs = "db.namespace=orders,syncguard.attempts=1,syncguard.hold.outcome=released,syncguard.lock.label=jobs,syncguard.outcome=acquired"
		const events = "acquired{syncguard.attempts,syncguard.wait.duration},released{}"
		for _, name := range []string{"syncguard.with_lock", "syncguard.lock"} {
			want := name + " internal Unset [" + attrs + "] [" + events + "]"
			if got := renderSpan(lastSpan(t, r, name)); got != want {
				t.Errorf("span:\n%s\nwant:\n%s", got, want)
			}
		}
	})
}

// Every attribute key on the spans, their events and the metric points is
// one otelsyncguard exports (AttrOutcome, ...) or a semantic convention's
// (go.opentelemetry.io/otel/semconv), besides WithAttributes' own: users
// filter and group on the exported names. Each exported key but the
// election's (otelsyncguard/internal/sdktest) shows up here.
func TestAttributeKeysAreExported(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		locks := syncguardtest.New()
		r := newRig(t, locks, otelsyncguard.WithAttributes(attributeDB),
			otelsyncguard.WithKeyLabel(func(string) string { return "jobs" }))
		// Operations, a failure and an error.
		a, err := r.Acquire(ctx, "jobs:a", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		r.Release(ctx, a.LockID)
		r.Release(ctx, a.LockID)
		locks.Fail(syncguardtest.OpAcquire, syncguard.ErrServiceUnavailable, 1)
		r.Acquire(ctx, "jobs:a", time.Minute)
		// A wait that gives up, and a lease that loses its lock.
		if err := locks.Contend("jobs:a", 1000); err != nil {
			t.Fatal(err)
		}
		opts := *polling
		opts.Acquisition.Timeout = 300 * time.Millisecond
		if err := r.WithLock(ctx, "jobs:a", nop, &opts); err == nil {
			t.Fatal("WithLock on a key contended 1000 times got it")
		}
		err = r.WithLock(ctx, "jobs:b", func(ctx context.Context, lease *syncguard.Lease) error {
			locks.Delete(lease.LockID())
			_, err := lease.Extend(ctx, time.Minute)
			return err
		}, nil)
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait()

		allowed := map[attribute.Key]bool{attributeDB.Key: true}
		for _, k := range []attribute.Key{
			otelsyncguard.AttrOutcome, otelsyncguard.AttrReason, otelsyncguard.AttrLossReason,
			otelsyncguard.AttrLockLabel, otelsyncguard.AttrAttempts, otelsyncguard.AttrWaitDuration,
			otelsyncguard.AttrHoldOutcome,
			semconv.DBSystemNameKey, semconv.DBOperationNameKey, semconv.ErrorTypeKey,
			semconv.ExceptionMessageKey, semconv.ExceptionTypeKey,
		} {
			allowed[k] = false
		}
		see := func(where string, kvs []attribute.KeyValue) {
			for _, kv := range kvs {
				seen, ok := allowed[kv.Key]
				if !ok {
					t.Errorf("%s: attribute %s is neither exported by otelsyncguard nor a semantic convention's", where, kv.Key)
				}
				if !seen {
					allowed[kv.Key] = true
				}
			}
		}
		for _, s := range r.spans.Ended() {
			see("span "+s.Name(), s.Attributes())
			for _, e := range s.Events() {
				see("event "+e.Name+" of "+s.Name(), e.Attributes)
			}
		}
		c := r.collect(t)
		for _, sm := range c.rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				switch d := m.Data.(type) {
				case metricdata.Sum[int64]:
					for _, p := range d.DataPoints {
						see(m.Name, p.Attributes.ToSlice())
					}
				case metricdata.Histogram[float64]:
					for _, p := range d.DataPoints {
						see(m.Name, p.Attributes.ToSlice())
					}
				}
			}
		}
		for k, seen := range allowed {
			if !seen {
				t.Errorf("attribute %s recorded nowhere", k)
			}
		}
	})
}
