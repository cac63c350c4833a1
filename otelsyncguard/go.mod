module github.com/syncguard/syncguard-go/otelsyncguard

go 1.25.0

require (
	github.com/syncguard/syncguard-go v0.1.0
	go.opentelemetry.io/otel v1.46.0
	go.opentelemetry.io/otel/metric v1.46.0
	go.opentelemetry.io/otel/trace v1.46.0
)
