module github.com/syncguard/syncguard-go/internal/oteltest

go 1.26.0

require (
	github.com/syncguard/syncguard-go v0.1.0
	github.com/syncguard/syncguard-go/otelsyncguard v0.1.0
	go.opentelemetry.io/otel v1.47.0
	go.opentelemetry.io/otel/exporters/prometheus v0.69.0
	go.opentelemetry.io/otel/metric v1.47.0
	go.opentelemetry.io/otel/sdk v1.47.0
	go.opentelemetry.io/otel/sdk/metric v1.47.0
	go.opentelemetry.io/otel/trace v1.47.0
)
