module github.com/syncguard/syncguard-go/otelsyncguard/internal/sdktest

go 1.26.0

require (
	github.com/prometheus/client_golang v1.24.1
	github.com/syncguard/syncguard-go v0.1.0
	github.com/syncguard/syncguard-go/otelsyncguard v0.1.0
	go.opentelemetry.io/otel/exporters/prometheus v0.69.0
	go.opentelemetry.io/otel/sdk/metric v1.47.0
)
