// Package oteltest tests otelsyncguard with the OpenTelemetry SDK (a manual
// metric reader, an in-memory span recorder) and holds its Prometheus
// example program (promexample) and overhead benchmarks. It is test
// machinery: never published, so otelsyncguard's go.mod stays free of the
// SDK.
package oteltest
