package main

import (
	"bufio"
	"embed"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

//go:embed consumer/*.txt
var consumerFiles embed.FS

// allowedInGoSum are the module path prefixes a consumer of the published
// modules may find in its go.sum: our modules, the two drivers and their own
// dependencies (pgx's tests' included, as go.sum lists go.mod hashes of the
// pruned graph), and golang.org/x.
var allowedInGoSum = []string{
	modulePath,
	"github.com/jackc/",
	"github.com/lib/pq",
	"golang.org/x/",
	// pgx's test dependencies, listed by go.mod hash only:
	"github.com/stretchr/testify",
	"github.com/davecgh/go-spew",
	"github.com/pmezard/go-difflib",
	"github.com/kr/pretty",
	"github.com/kr/text",
	"github.com/rogpeppe/go-internal",
	"github.com/creack/pty",
	"gopkg.in/yaml.v3",
	"gopkg.in/check.v1",
	"github.com/stretchr/objx",
	// The core's own unit-test dependency (no dependencies of its own):
	// listed by go.mod hash because the core's go.mod requires it.
	"github.com/DATA-DOG/go-sqlmock",
}

// allowedInOtelGoSum are what a consumer of otelsyncguard that leaves the
// SDK to its application may also find in its go.sum: the OpenTelemetry API
// and its own dependencies. Never an SDK or an exporter.
var allowedInOtelGoSum = []string{
	// A trailing space: this module exactly; else a path prefix.
	"go.opentelemetry.io/otel ",
	"go.opentelemetry.io/otel/metric ",
	"go.opentelemetry.io/otel/trace ",
	"go.opentelemetry.io/auto/sdk ", // the API's auto-instrumentation hook, required by otel itself
	"github.com/go-logr/",
	"github.com/cespare/xxhash/",
	"github.com/google/go-cmp",
	"go.yaml.in/yaml/",
}

// check simulates a release as a downstream team meets it: a file-system
// GOPROXY holding the published modules at a pre-release version made from
// this tree, an empty module cache, and only GONOSUMDB set for our path.
func (ws *workspace) check() error {
	base, err := ws.currentVersion()
	if err != nil {
		return err
	}
	published := map[string]bool{}
	for _, m := range ws.publishedModules() {
		published[m.Path] = true
	}
	for _, m := range ws.publishedModules() {
		if len(m.File.Replace) > 0 {
			return fmt.Errorf("%s/go.mod has a replace directive: consumers ignore it (develop with go.work instead)", m.Dir)
		}
		for _, r := range m.File.Require {
			if isSibling(r.Mod.Path) && !published[r.Mod.Path] {
				return fmt.Errorf("published module %s requires %s, which is not published (test machinery, tools, examples)", m.Dir, r.Mod.Path)
			}
		}
	}
	// A version of its own each run: the go command indexes module cache
	// directories in its build cache (GOCACHE) on the assumption that a
	// module version never changes, so reusing one would read a stale index.
	version := fmt.Sprintf("%s-releasecheck.%d", base, time.Now().Unix())
	tmp, err := os.MkdirTemp("", "syncguard-release-check-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	proxy, cache := filepath.Join(tmp, "proxy"), filepath.Join(tmp, "modcache")
	fmt.Printf("release-check: published modules at %s in a file-system GOPROXY, empty module cache\n", version)
	if err := ws.buildProxy(proxy, version, ws.publishedModules()); err != nil {
		return err
	}
	env := goEnv(proxy, cache)

	// 1. A consumer of both adapters, the core and conformance.
	consumer := filepath.Join(tmp, "consumer")
	if err := writeModule(consumer, "example.com/consumer", map[string]string{
		"main.go":             "consumer/main.go.txt",
		"conformance_test.go": "consumer/conformance_test.go.txt",
		"handler_test.go":     "consumer/handler_test.go.txt",
	}, env); err != nil {
		return err
	}
	steps := [][]string{
		{"go", "get", modulePath + "/pgxstd@" + version},
		{"go", "get", modulePath + "/pq@" + version},
		{"go", "mod", "tidy"},
		{"go", "build", "./..."},
		{"go", "vet", "./..."},
		{"go", "test", "-count=1", "./..."},
	}
	for _, s := range steps {
		if _, err := run(consumer, env, s[0], s[1:]...); err != nil {
			return err
		}
	}
	mods, err := goSumModules(filepath.Join(consumer, "go.sum"))
	if err != nil {
		return err
	}
	var bad []string
	for _, m := range mods {
		if !allowed(m) {
			bad = append(bad, m)
		}
	}
	consumerLines, _ := countLines(filepath.Join(consumer, "go.sum"))

	// 2. The plain pgx consumer, for scale.
	plain := filepath.Join(tmp, "plain")
	if err := writeModule(plain, "example.com/plain", map[string]string{"main.go": "consumer/plain.go.txt"}, env); err != nil {
		return err
	}
	if _, err := run(plain, env, "go", "mod", "tidy"); err != nil {
		return err
	}
	plainLines, _ := countLines(filepath.Join(plain, "go.sum"))

	// 3. go install of the CLI, then its version.
	bin := filepath.Join(tmp, "bin")
	installEnv := append(append([]string(nil), env...), "GOBIN="+bin)
	if _, err := run(tmp, installEnv, "go", "install", modulePath+"/cmd/syncguard@"+version); err != nil {
		return err
	}
	out, err := run(tmp, env, filepath.Join(bin, "syncguard"), "version")
	if err != nil {
		return err
	}
	fmt.Printf("  syncguard version: %s", out)
	if !strings.Contains(out, version) || !strings.Contains(out, "go1.") {
		return fmt.Errorf("installed syncguard version printed %q, want it to name %s and the Go version it was built with", strings.TrimSpace(out), version)
	}

	fmt.Printf("release-check: consumer go.sum %d lines, %d modules (a plain pgx consumer: %d lines)\n", consumerLines, len(mods), plainLines)
	if len(bad) > 0 {
		return fmt.Errorf("the consumer's go.sum names modules outside the allow-list (test machinery leaking into a published module?):\n  %s", strings.Join(bad, "\n  "))
	}

	// 4. otelsyncguard: a library that uses only it and the API gets no
	// SDK; an application with the SDK and the Prometheus exporter sees
	// the series of a contended WithLock at its /metrics.
	if err := checkOtel(tmp, env, version); err != nil {
		return err
	}
	fmt.Println("release-check: ok (go get, go mod tidy, go build, go vet, go test, go install)")
	return nil
}

// The version of the Prometheus exporter the otel consumer's application
// picks (tests/oteltest uses the same; it brings the SDK v1.47.0).
const otelPrometheusVersion = "v0.69.0"

func checkOtel(tmp string, env []string, version string) error {
	api := filepath.Join(tmp, "otelapi")
	if err := writeModule(api, "example.com/otelapi", map[string]string{"main.go": "consumer/otelapi.go.txt"}, env); err != nil {
		return err
	}
	for _, s := range [][]string{
		{"go", "get", modulePath + "/otelsyncguard@" + version, modulePath + "/pgxstd@" + version},
		{"go", "mod", "tidy"},
		{"go", "build", "./..."},
	} {
		if _, err := run(api, env, s[0], s[1:]...); err != nil {
			return err
		}
	}
	mods, err := goSumModules(filepath.Join(api, "go.sum"))
	if err != nil {
		return err
	}
	var bad []string
	for _, m := range mods {
		if !allowed(m) && !allowedOtel(m) {
			bad = append(bad, m)
		}
	}
	lines, _ := countLines(filepath.Join(api, "go.sum"))
	fmt.Printf("release-check: otelsyncguard API-only consumer go.sum %d lines, %d modules\n", lines, len(mods))
	if len(bad) > 0 {
		return fmt.Errorf("a consumer of otelsyncguard without an SDK has modules outside the allow-list in its go.sum (an SDK or exporter leaking into otelsyncguard's go.mod?):\n  %s", strings.Join(bad, "\n  "))
	}

	app := filepath.Join(tmp, "otelapp")
	if err := writeModule(app, "example.com/otelapp", map[string]string{
		"main.go":         "consumer/otelapi.go.txt",
		"metrics_test.go": "consumer/otelmetrics_test.go.txt",
	}, env); err != nil {
		return err
	}
	for _, s := range [][]string{
		{"go", "get", modulePath + "/otelsyncguard@" + version, modulePath + "/pgxstd@" + version},
		// The exporter requires the metric SDK at otelSDKVersion.
		{"go", "get", "go.opentelemetry.io/otel/exporters/prometheus@" + otelPrometheusVersion},
		{"go", "mod", "tidy"},
		{"go", "vet", "./..."},
		{"go", "test", "-count=1", "./..."},
	} {
		if _, err := run(app, env, s[0], s[1:]...); err != nil {
			return err
		}
	}
	return nil
}

func allowedOtel(mod string) bool {
	for _, p := range allowedInOtelGoSum {
		if exact, ok := strings.CutSuffix(p, " "); ok {
			if mod == exact {
				return true
			}
		} else if strings.HasPrefix(mod, p) {
			return true
		}
	}
	return false
}

// writeModule creates dir with `go mod init path` and the embedded files.
func writeModule(dir, path string, files map[string]string, env []string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if _, err := run(dir, env, "go", "mod", "init", path); err != nil {
		return err
	}
	for name, src := range files {
		data, err := consumerFiles.ReadFile(src)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

func allowed(mod string) bool {
	for _, p := range allowedInGoSum {
		if mod == p || strings.HasPrefix(mod, p) {
			return true
		}
	}
	return false
}

// goSumModules lists the module paths in a go.sum file.
func goSumModules(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	seen := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fields := strings.Fields(sc.Text()); len(fields) > 0 {
			seen[fields[0]] = true
		}
	}
	var out []string
	for m := range seen {
		out = append(out, m)
	}
	sort.Strings(out)
	return out, sc.Err()
}

func countLines(path string) (int, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strings.Count(string(data), "\n"), nil
}
