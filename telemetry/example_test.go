package telemetry_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/syncguard/syncguard-go/syncguardtest"
	"github.com/syncguard/syncguard-go/telemetry"
)

// Every operation of a backend whose Tracer is a telemetry Tracer becomes
// a LockEvent, here logged with the ready-made slog sink. Keys and lockIds
// appear only as hashes unless IncludeRaw is set.
func Example() {
	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey || a.Key == "duration" {
				return slog.Attr{} // keep the example's output stable
			}
			return a
		},
	}))
	ctx := context.Background()
	locks := syncguardtest.New()                    // in a program: syncguard.New(db, &syncguard.Config{Tracer: events})
	locks.Acquire(ctx, "report:daily", time.Minute) // another process holds the report

	events := telemetry.New(telemetry.Options{OnEvent: telemetry.SlogSink(logger, slog.LevelInfo)})
	locks.SetTracer(events)
	_, _ = locks.Acquire(ctx, "report:daily", time.Minute)
	_, _ = locks.IsLocked(ctx, "report:daily")

	// Events are delivered off the caller's path; wait for them here.
	if err := events.Flush(ctx); err != nil {
		fmt.Println(err)
	}
	// Output:
	// level=INFO msg="syncguard: acquire fail" type=acquire result=fail keyHash=f8649053c9b9721949b73965 reason=locked
	// level=INFO msg="syncguard: isLocked ok" type=isLocked result=ok keyHash=f8649053c9b9721949b73965
}
