package syncguard

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/DATA-DOG/go-sqlmock"
)

type opKey struct{}

// opRecorder records each OpEnd, with whether OpStart's context reached it.
type opRecorder struct{ ends []string }

func (r *opRecorder) OpStart(ctx context.Context, op TraceOp) context.Context {
	return context.WithValue(ctx, opKey{}, op.Op)
}
func (r *opRecorder) OpEnd(ctx context.Context, op TraceOp) {
	r.ends = append(r.ends, fmt.Sprintf("%s key=%q id=%v ok=%v reason=%s err=%v ctx=%v", op.Op, op.Key, op.LockID != "", op.OK, op.Reason,
		CodeOf(op.Err), ctx.Value(opKey{}) == op.Op && op.Locker != nil))
}
func (r *opRecorder) LockStart(ctx context.Context, _ TraceLock) context.Context { return ctx }
func (r *opRecorder) WaitEnd(context.Context, TraceLock)                         {}
func (r *opRecorder) HoldEnd(context.Context, TraceLock)                         {}
func (r *opRecorder) LockEnd(context.Context, TraceLock)                         {}

// Rule: a Backend with Config.Tracer traces each of its operations, its
// WithTx views' too, invalid input included, once (LookupKey is not also
// a LookupKeyDebug), with the outcome its result reports.
func TestBackendTracesItsOperations(t *testing.T) {
	rec := &opRecorder{}
	b, mock := newMock(t, &Config{Tracer: rec})
	if b.Tracer() != rec {
		t.Fatal("Tracer() is not Config.Tracer")
	}
	cols := []string{"lock_id", "expires_at_ms", "acquired_at_ms", "fence", "fence_exhausted", "now_ms", "absent", "opened", "ahead_n"}
	mock.ExpectQuery("INSERT INTO").WillReturnRows(sqlmock.NewRows(cols).AddRow("BBBBBBBBBBBBBBBBBBBBBB", int64(2000), int64(1000), "000000000000007", false, int64(1500), false, false, int64(0)))
	rc := []string{"lock_id", "seen", "now", "woke", "woke_channel", "left_queue"}
	mock.ExpectQuery("DELETE FROM").WillReturnRows(sqlmock.NewRows(rc).AddRow(nil, int64(500), int64(2000), nil, nil, false))
	ec := []string{"lock_id", "new", "seen", "now"}
	mock.ExpectQuery("UPDATE").WillReturnRows(sqlmock.NewRows(ec).AddRow(nil, nil, nil, int64(2000)))
	ctx := context.Background()
	b.Acquire(ctx, "k", time.Second)
	b.Acquire(ctx, "", time.Second)
	b.WithTx(nil).Release(ctx, goodID)
	b.Extend(ctx, goodID, time.Second)
	b.LookupID(ctx, "bad id")
	if err := mock.ExpectationsWereMet(); err != nil {
		t.Fatal(err)
	}
	want := []string{
		`acquire key="k" id=false ok=false reason=locked err= ctx=true`,
		`acquire key="" id=false ok=false reason= err=InvalidArgument ctx=true`,
		`release key="" id=true ok=false reason=expired err= ctx=true`,
		`extend key="" id=true ok=false reason=not-found err= ctx=true`,
		`lookup key="" id=true ok=false reason= err=InvalidArgument ctx=true`,
	}
	if got := strings.Join(rec.ends, "\n"); got != strings.Join(want, "\n") {
		t.Errorf("OpEnd calls:\n%s\nwant:\n%s", got, strings.Join(want, "\n"))
	}
}

type nopTracer struct{ opRecorder }

func (*nopTracer) OpStart(ctx context.Context, _ TraceOp) context.Context { return ctx }
func (*nopTracer) OpEnd(context.Context, TraceOp)                         {}

// BenchmarkTraceOp is what tracing with a Tracer that does nothing adds
// to each operation of a Backend (without a Tracer: a nil check).
func BenchmarkTraceOp(b *testing.B) {
	be := &Backend{shared: &shared{cfg: resolved{Config{Tracer: &nopTracer{}}}}}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		o, c := be.startOp(ctx, "acquire", "k", "")
		o.end(c != nil, "", "id", nil)
	}
}
