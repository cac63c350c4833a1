// Package sdktest tests otelsyncguard's election metrics with the
// OpenTelemetry SDK (a manual reader) and the Prometheus exporter: the
// alert expressions of docs/observability.md evaluated by value over
// collected snapshots. It is a module of its own, never published, so that
// otelsyncguard's go.mod stays free of the SDK (a consumer's go.sum may
// hold the API only; make release-check checks it).
package sdktest
