package syncguard

import (
	"bytes"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
)

// fileDeps type-checks this package's non-test files and returns, for each
// file, the other files whose definitions it uses (package-level names,
// methods and struct fields), with the names used.
func fileDeps(t *testing.T) map[string]map[string][]string {
	t.Helper()
	fset := token.NewFileSet()
	_, parsed := parsePackage(t)
	var files []*ast.File
	for name := range parsed {
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	info := &types.Info{Uses: map[*ast.Ident]types.Object{}}
	conf := types.Config{Importer: importer.ForCompiler(fset, "source", nil)}
	pkg, err := conf.Check("syncguard", fset, files, info)
	if err != nil {
		t.Fatalf("type-checking the package: %v", err)
	}
	fileOf := func(p token.Pos) string { return filepath.Base(fset.Position(p).Filename) }
	deps := map[string]map[string][]string{}
	for id, obj := range info.Uses {
		if obj == nil || obj.Pkg() != pkg || !obj.Pos().IsValid() {
			continue
		}
		switch o := obj.(type) {
		case *types.Var:
			if !o.IsField() && o.Parent() != pkg.Scope() {
				continue // a local variable
			}
		case *types.Func, *types.TypeName, *types.Const:
			if o.Parent() != nil && o.Parent() != pkg.Scope() {
				continue // declared inside a function
			}
		default:
			continue
		}
		from, to := fileOf(id.Pos()), fileOf(obj.Pos())
		if from == to {
			continue
		}
		if deps[from] == nil {
			deps[from] = map[string][]string{}
		}
		deps[from][to] = append(deps[from][to], obj.Name())
	}
	return deps
}

// TestNoFileCycles: the files of package syncguard read top-down. No file
// uses a definition of a file that uses one of its own, directly or around
// a longer loop, so each concept lives in one file and depends only on
// files "below" it.
func TestNoFileCycles(t *testing.T) {
	deps := fileDeps(t)
	names := func(ns []string) string {
		sort.Strings(ns)
		return strings.Join(slices.Compact(ns), ", ")
	}
	for a, m := range deps {
		for b, used := range m {
			if a < b && deps[b][a] != nil {
				t.Errorf("file cycle: %s uses %s of %s, and %s uses %s of %s", a, names(used), b, b, names(deps[b][a]), a)
			}
		}
	}
	// Longer loops: a depth-first search over the file graph.
	const (
		unseen = iota
		active
		done
	)
	state := map[string]int{}
	var stack []string
	var visit func(f string)
	visit = func(f string) {
		state[f] = active
		stack = append(stack, f)
		var next []string
		for g := range deps[f] {
			next = append(next, g)
		}
		sort.Strings(next)
		for _, g := range next {
			switch state[g] {
			case unseen:
				visit(g)
			case active:
				i := len(stack) - 1
				for stack[i] != g {
					i--
				}
				if len(stack)-i > 2 { // pairs are reported above
					t.Errorf("file cycle: %s -> %s", strings.Join(stack[i:], " -> "), g)
				}
			}
		}
		stack = stack[:len(stack)-1]
		state[f] = done
	}
	var all []string
	for f := range deps {
		all = append(all, f)
	}
	sort.Strings(all)
	for _, f := range all {
		if state[f] == unseen {
			visit(f)
		}
	}
}

// The core package stays readable in an afternoon: at most 4,000 non-test
// lines (issue 20); mechanisms of their own go to packages of their own.
func TestPackageSize(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	lines := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		lines += bytes.Count(b, []byte("\n"))
	}
	if lines > 4000 {
		t.Errorf("package syncguard has %d non-test lines; at most 4,000 (move a mechanism to a package of its own)", lines)
	}
}
