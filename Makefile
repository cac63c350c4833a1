# syncguard-go: every module's tests, the demo, benchmarks.
#
#   make test    the everyday run (its measured time is in README.md):
#                vet, then under -race the core with its integration
#                tests and the unit tests of the CLI, bench and
#                otelsyncguard (EVERYDAY), and beside them the conformance
#                groups on both adapters (EVERYDAY_ITEST); it prints what
#                it leaves to make check
#   make test-fresh  make demo and make test in a fresh clone of HEAD
#   make check   everything CI runs (.ci/run): make test plus the long
#                suites (SYNCGUARD_LONG=1), fuzzing, release-check and the
#                core's tests with the oldest supported Go
# Integration tests start a throwaway PostgreSQL from installed binaries
# (/usr/lib/postgresql/*/bin) or use SYNCGUARD_TEST_DSN.

GO ?= go
export PATH := /usr/local/go/bin:$(PATH)

# Modules: every `use` line of go.work (the core, ".", first).
MODULES := $(shell sed -n 's/^[[:space:]]*\.\/\{0,1\}\([^[:space:]]*\)$$/\1/p' go.work | sed 's/^$$/./')
# The lowest Go release the published modules support: the core's go line.
MIN_GO := $(shell sed -n 's/^go //p' go.mod)
TEST_FLAGS ?= -race -count=1 -timeout 25m
# A -race binary that exits 0 sleeps 1 s first (GORACE atexit_sleep_ms, for
# late race reports): a second per test package and per command the tests
# run. Races are still reported and fail the run without it.
export GORACE ?= atexit_sleep_ms=0

# package:target pairs
FUZZ_TARGETS := ./internal/rules:FuzzNormalizeAndStorageKeys ./internal/rules:FuzzMakeStorageKey \
	./internal/rules:FuzzHashKey ./internal/rules:FuzzValidateLockID ./internal/rules:FuzzFormatFence \
	./syncguard:FuzzCheckKey ./internal/classify:FuzzClassify
FUZZTIME ?= 3s

# What make test leaves to make check (printed by make test, so that
# nothing is skipped silently; each long test also skips with a message
# naming SYNCGUARD_LONG).
LONG_SUITES := tests/itest beyond the conformance groups (PgBouncer, pool kinds, adversary, txguard), the CLI \
	end to end (tests/clitest), the fault suite (tests/chaos), failovers on pg_auto_failover and Patroni (tests/ha), \
	OpenTelemetry end to end (tests/oteltest), the ORM and CI examples (examples), fuzzing, release-check, the core \
	with go$(MIN_GO)

# make test's modules and packages (module:pattern): the core with its
# integration tests and the conformance suite on both adapters, the CLI's,
# bench's and otelsyncguard's unit tests and the quick start. The rest is
# make check's (LONG_SUITES).
EVERYDAY := .:./... pq:./... pgxstd:./... cmd/syncguard:./... bench:./... otelsyncguard:./... \
	examples:./quickstart/... tests/pgtest:./...
# and from tests/itest the published conformance groups (mutex, election,
# semaphore, rwlock, multilock) on both adapters, directly, and across them:
# EVERYDAY_ITEST, run as two processes side by side (ITEST_PQ, ITEST_PGX),
# each with a server of its own.
ITEST_GROUPS := ^Test(Conformance|Semaphore|RWLockConformance|MultiLockConformance)
ITEST_PQ := $(ITEST_GROUPS)PQ$$
ITEST_PGX := $(ITEST_GROUPS)PGX$$|^TestCrossDriver$$
EVERYDAY_ITEST := $(ITEST_PQ)|$(ITEST_PGX)
# The flags of the tests/itest binary built once for both runs.
ITEST_RUN_FLAGS ?= -test.count=1 -test.timeout=25m
# $(MAKE) at parse time: a recipe line naming $(MAKE) itself runs under make -n.
SUBMAKE := $(MAKE)

.PHONY: test check test-modules test-everyday-modules vet demo bench schema tidy fuzz deps release release-check test-min-go test-loaded

# The everyday run (its time: README.md): vet, then under -race
# EVERYDAY's packages one after another, while the conformance runs, which
# mostly wait on timers, run beside them (scripts/run-jobs.sh: each job's
# output as one block when it ends, then a summary naming the failed
# tests). The long suites are skipped (they say so).
test: deps vet
	@echo "== make test: left to make check: $(LONG_SUITES)"
	@set -e; export SYNCGUARD_LONG=; bin=$$(mktemp -d); trap 'rm -rf "$$bin"' EXIT; \
	echo "== go test -c tests/itest (run twice below: $(ITEST_PQ) and $(ITEST_PGX))"; \
	(cd tests/itest && $(GO) test $(filter -race,$(TEST_FLAGS)) -c -o "$$bin/itest.test" .); \
	scripts/run-jobs.sh \
		"modules=$(SUBMAKE) --no-print-directory test-everyday-modules" \
		"tests/itest PQ=cd tests/itest && $$bin/itest.test $(ITEST_RUN_FLAGS) -test.run '$(ITEST_PQ)'" \
		"tests/itest PGX, cross-driver=cd tests/itest && $$bin/itest.test $(ITEST_RUN_FLAGS) -test.run '$(ITEST_PGX)'"

# EVERYDAY's packages, one module after another (part of make test).
test-everyday-modules:
	@set -e; for mp in $(EVERYDAY); do m=$${mp%%:*}; p=$${mp#*:}; \
		echo "== go test $$m $$p"; (cd $$m && $(GO) test $(TEST_FLAGS) $$p); \
	done

# Everything, as CI runs it (.ci/run): make test's tests with the long
# suites (SYNCGUARD_LONG=1), fuzzing, the release check and the core's
# tests with the oldest Go it claims. About 28 minutes on 2 cores.
check: deps vet fuzz release-check test-min-go
	@$(MAKE) --no-print-directory test-modules SYNCGUARD_LONG=1

test-modules:
	@set -e; export SYNCGUARD_LONG="$(SYNCGUARD_LONG)"; for m in $(MODULES); do \
		if [ -f $$m/go.mod ]; then \
			echo "== go test $$m"; \
			(cd $$m && $(GO) test $(TEST_FLAGS) ./...); \
		fi; \
	done

# make test three times in a row while another CPU-heavy process keeps both
# cores busy: a -race build of every module from scratch (-a), in a loop.
# Tests must hold on a busy machine (no wall-clock bound that load breaks).
# The load runs in a process group of its own, ended when the runs end.
test-loaded:
	@set -e; \
	setsid sh -c 'while :; do for m in $(MODULES); do \
		[ -f $$m/go.mod ] && (cd $$m && $(GO) build -a -race -o /dev/null ./... >/dev/null 2>&1); done; done' & \
	load=$$!; trap 'kill -TERM -'$$load' 2>/dev/null || true' EXIT INT TERM; \
	for i in 1 2 3; do echo "== make test, run $$i of 3, under load (-race build loop, pid $$load)"; $(MAKE) --no-print-directory test; done; \
	echo "== make test passed 3 times under load"

# What a newcomer sees: the README's two commands (make demo, make test)
# in a fresh clone of the committed HEAD, each one's result and duration,
# then the clone removed (scripts/test-fresh.sh; TEST_FRESH_DRY=1 clones
# and stops, TEST_FRESH_STEPS=demo runs the demo only). Run it before
# calling work done: uncommitted or untracked files are not in the clone.
.PHONY: test-fresh
test-fresh:
	@scripts/test-fresh.sh

vet:
	@set -e; for m in $(MODULES); do \
		if [ -f $$m/go.mod ]; then (cd $$m && $(GO) vet ./...); fi; \
	done
	@test -z "$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))" || { gofmt -l .; echo "gofmt needed"; exit 1; }

# Each fuzz target for a short time (the rules' seeded from testdata/reference-vectors.json).
# A failing input is saved under the package's testdata/fuzz and fails the
# second run at once; a failure that does not come back (the fuzzing engine
# losing a worker on a loaded machine) is reported but does not fail.
fuzz:
	@set -e; for pf in $(FUZZ_TARGETS); do p=$${pf%%:*}; f=$${pf#*:}; \
		out=$$($(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$p 2>&1) || { \
		echo "fuzz $$p $$f failed; running it again:"; echo "$$out" | tail -15; \
		$(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$p || exit 1; }; \
		echo "fuzz $$p $$f ok"; \
	done

demo:
	@scripts/deps.sh demo
	cd examples/demo && $(GO) run .

# Installs missing Debian packages (as root) or says what to install.
deps:
	@SYNCGUARD_EXTRA_PACKAGES="$(HA_PACKAGES)" scripts/deps.sh test

# The core's tests with the oldest Go its go.mod claims (the toolchain comes
# through the module proxy), outside the workspace, so the claim stays true.
test-min-go:
	@echo "== go test . with go$(MIN_GO)"
	GOWORK=off GOTOOLCHAIN=go$(MIN_GO) $(GO) test -count=1 ./...

# A simulated release as a user meets it: see docs/release.md.
release-check:
	$(GO) run ./tools/release check

# make release VERSION=vX.Y.Z: sets the version at which the published
# modules require each other and prints the tags to push (docs/release.md).
release:
	@test -n "$(VERSION)" || { echo "usage: make release VERSION=vX.Y.Z"; exit 2; }
	$(GO) run ./tools/release version $(VERSION)
	$(GO) run ./tools/release tidy

schema:
	$(GO) generate ./syncguard

# go mod tidy of every module, without replace directives (the siblings are
# served from a file-system proxy of this tree; see tools/release).
tidy:
	$(GO) run ./tools/release tidy

-include bench/Makefile.inc
-include tests/chaos/Makefile.inc
-include tests/ha/Makefile.inc
