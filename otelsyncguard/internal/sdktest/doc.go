// Package sdktest tests otelsyncguard's election metrics with the SDK and
// the Prometheus exporter, in a module of its own so that otelsyncguard's
// go.mod stays free of the SDK (make release-check checks it).
package sdktest
