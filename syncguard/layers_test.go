package syncguard

import (
	"strings"
	"testing"
)

// The layers of the repository (docs/design.md, Layout), bottom up: the
// internal packages; the core (syncguard, driver); what is built on the
// core's exported API (the adapters pq and pgxstd, doctor, election, advisory, txguard,
// conformance, syncguardtest, otelsyncguard); the CLI. Outside them, the
// test suites, tools, examples and benchmarks (tests/, tools/, examples/,
// bench/) may import anything, and nothing of the library imports them.
// These tests read the imports of the non-test code (sourceTree,
// layout_test.go).

// aboveInternal are the packages (with their subpackages) that no internal
// package may import: the core and what is built on it.
var aboveInternal = []string{"syncguard", "doctor", "election", "conformance", "advisory", "syncguardtest", "txguard", "semaphore", "multilock", "rwlock"}

// outsideLibrary are the folders of programs and suites outside the
// library, which its non-test code must not import.
var outsideLibrary = []string{"tests", "tools", "examples", "bench"}

// underPath reports whether path is pkg or one of its subpackages.
func underPath(path, pkg string) bool { return path == pkg || strings.HasPrefix(path, pkg+"/") }

// TestInternalImportsNoHigherLayer: the internal packages form two layers.
// Below the core, those it builds on (rules, classify, waiting, deploy,
// ...): none imports the core or a package built on it. Above the core,
// glue shared by the packages built on it (errwrap, which gives advisory
// and the CLI the core's error model): imported only by packages above
// the core, never by the core or an internal package below it. An arrow
// from a lower layer to a higher one would hide the architecture.
func TestInternalImportsNoHigherLayer(t *testing.T) {
	tr := loadTree(t)
	isAbove := func(path string) bool {
		for _, up := range aboveInternal {
			if underPath(path, tr.modulePath+"/"+up) {
				return true
			}
		}
		return false
	}
	above := map[string]bool{} // internal packages that import the core or a package built on it
	for _, p := range tr.sortedPackages() {
		if !tr.isInternal(p) {
			continue
		}
		for imp := range p.imports {
			if isAbove(imp) {
				above[p.path] = true
			}
		}
	}
	outside := func(p *srcPkg) bool { // tests/, tools/, examples/, bench/: anything
		for _, out := range outsideLibrary {
			if underPath(p.dir, out) {
				return true
			}
		}
		return false
	}
	for _, p := range tr.sortedPackages() {
		for _, imp := range sortedKeys(p.imports) {
			if !above[imp] || outside(p) {
				continue
			}
			if tr.isInternal(p) && !above[p.path] || p.path == tr.modulePath+"/syncguard" || !tr.isInternal(p) && !isAbove(p.path) && !tr.isCLI(p) {
				t.Errorf("%s imports %s, an internal package above the core (it imports the core): only packages above the core may", p.dir, imp)
			}
		}
	}
	if len(above) == 0 {
		return
	}
	t.Logf("internal packages above the core: %v", sortedKeys(above))
}

// TestLibraryImportsNoTestMachinery: the published modules' non-test code
// imports nothing of tests/, tools/, examples/ or bench/.
func TestLibraryImportsNoTestMachinery(t *testing.T) {
	tr := loadTree(t)
	for _, p := range tr.sortedPackages() {
		if !tr.isPublished(p) {
			continue
		}
		for _, imp := range sortedKeys(p.imports) {
			for _, out := range outsideLibrary {
				if underPath(imp, tr.modulePath+"/"+out) {
					t.Errorf("%s (published module %s) imports %s, which is outside the library (%s/)", p.dir, p.module, imp, out)
				}
			}
		}
	}
}

// TestInternalHoldsOnlyTheLibrarysPackages: every package under internal/
// is imported, directly or through another internal package, by the
// non-test code of a published package outside internal/. Test suites,
// harnesses and tools live in tests/ and tools/.
func TestInternalHoldsOnlyTheLibrarysPackages(t *testing.T) {
	tr := loadTree(t)
	used := map[string]bool{}
	var visit func(path string)
	visit = func(path string) {
		if used[path] {
			return
		}
		used[path] = true
		if p := tr.pkgs[path]; p != nil {
			for imp := range p.imports {
				visit(imp)
			}
		}
	}
	for _, p := range tr.sortedPackages() {
		if tr.isPublished(p) && !tr.isInternal(p) {
			visit(p.path)
		}
	}
	n := 0
	for _, p := range tr.sortedPackages() {
		if !tr.isInternal(p) {
			continue
		}
		n++
		switch {
		case len(p.lines) == 0:
			t.Errorf("%s holds only tests: internal/ is for the library's own packages (test suites go to tests/)", p.dir)
		case !used[p.path]:
			t.Errorf("%s is imported by no package of the library (the published modules' non-test code): move it to tests/ or tools/, or delete it", p.dir)
		}
	}
	if n == 0 {
		t.Fatal("found no package under internal/")
	}
}
