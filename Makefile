# syncguard-go: every module's tests, the demo, benchmarks.
# Integration tests start a throwaway PostgreSQL from installed binaries
# (/usr/lib/postgresql/*/bin) or use SYNCGUARD_TEST_DSN.

GO ?= go
export PATH := /usr/local/go/bin:$(PATH)

# Modules, core first. Missing directories are skipped.
MODULES := . internal/pgtest pq pgxstd internal/itest internal/chaos internal/demo cmd/syncguard internal/clitest bench
TEST_FLAGS ?= -race -count=1 -timeout 10m

# package:target pairs
FUZZ_TARGETS := ./internal/rules:FuzzNormalizeAndStorageKeys ./internal/rules:FuzzMakeStorageKey \
	./internal/rules:FuzzHashKey ./internal/rules:FuzzValidateLockID ./internal/rules:FuzzFormatFence \
	./syncguard:FuzzCheckKey ./syncguard:FuzzClassify
FUZZTIME ?= 3s

.PHONY: test vet demo bench schema tidy fuzz

test: vet fuzz
	@set -e; for m in $(MODULES); do \
		if [ -f $$m/go.mod ]; then \
			echo "== go test $$m"; \
			(cd $$m && $(GO) test $(TEST_FLAGS) ./...); \
		fi; \
	done

vet:
	@set -e; for m in $(MODULES); do \
		if [ -f $$m/go.mod ]; then (cd $$m && $(GO) vet ./...); fi; \
	done
	@test -z "$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))" || { gofmt -l .; echo "gofmt needed"; exit 1; }

# Each fuzz target for a short time (the rules' seeded from testdata/reference-vectors.json).
fuzz:
	@set -e; for pf in $(FUZZ_TARGETS); do p=$${pf%%:*}; f=$${pf#*:}; \
		$(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$p >/dev/null || { echo "fuzz $$f failed"; \
		$(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$p; exit 1; }; \
		echo "fuzz $$p $$f ok"; \
	done

demo:
	cd internal/demo && $(GO) run .

schema:
	$(GO) generate ./syncguard

tidy:
	@for m in $(MODULES); do if [ -f $$m/go.mod ]; then (cd $$m && $(GO) mod tidy); fi; done

-include bench/Makefile.inc
-include internal/chaos/Makefile.inc
