// Command promexample serves syncguard's metrics at /metrics in the
// Prometheus format: the setup of docs/observability.md, with two workers
// that contend for one job so that the series show a wait.
//
//	DATABASE_URL=postgres://... LISTEN_ADDR=:9464 go run ./tests/oteltest/promexample
package main

import (
	"context"
	"database/sql"
	"errors"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/syncguard/syncguard-go/otelsyncguard"
	_ "github.com/syncguard/syncguard-go/pgxstd"
	"github.com/syncguard/syncguard-go/syncguard"
	"go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	addr := os.Getenv("LISTEN_ADDR")
	if addr == "" {
		addr = ":9464"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		log.Fatal(err)
	}
	if err := run(ctx, os.Getenv("DATABASE_URL"), ln, 2*time.Second); err != nil {
		log.Fatal(err)
	}
}

// run serves /metrics on ln until ctx ends; meanwhile two workers run the
// job "reports:daily" once each, the first holding it for hold.
func run(ctx context.Context, dsn string, ln net.Listener, hold time.Duration) error {
	// The setup of docs/observability.md.
	exporter, err := prometheus.New()
	if err != nil {
		return err
	}
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	defer provider.Shutdown(context.Background())
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	if err := syncguard.SetupSchema(ctx, db, nil); err != nil {
		return err
	}
	tracer := otelsyncguard.New(
		otelsyncguard.WithMeterProvider(provider),
		otelsyncguard.WithKeyLabel(func(key string) string {
			job, _, _ := strings.Cut(key, ":") // "reports": one series per kind of job
			return job
		}))
	defer tracer.Close()
	locks, err := syncguard.New(db, &syncguard.Config{Tracer: tracer})
	if err != nil {
		return err
	}
	defer locks.Close()

	srv := &http.Server{Handler: promhttp.Handler()}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()

	var workers sync.WaitGroup
	acquired := make(chan struct{})
	job := func(d time.Duration, started chan<- struct{}) func(context.Context, *syncguard.Lease) error {
		return func(ctx context.Context, lease *syncguard.Lease) error {
			if started != nil {
				close(started)
			}
			log.Printf("building the daily report with fence %s", lease.Fence())
			select {
			case <-time.After(d):
			case <-ctx.Done():
			}
			return nil
		}
	}
	opts := &syncguard.LockOptions{TTL: time.Minute, Acquisition: syncguard.AcquisitionOptions{Timeout: time.Minute}}
	workers.Go(func() {
		if err := syncguard.WithLock(ctx, locks, "reports:daily", job(hold, acquired), opts); err != nil {
			log.Print(err)
		}
	})
	workers.Go(func() {
		select {
		case <-acquired: // the second worker waits for the first
		case <-ctx.Done():
			return
		}
		if err := syncguard.WithLock(ctx, locks, "reports:daily", job(0, nil), opts); err != nil {
			log.Print(err)
		}
	})
	workers.Wait()
	log.Print("both workers ran the job; serving /metrics until interrupted")

	select {
	case <-ctx.Done():
	case err := <-served:
		return err
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
