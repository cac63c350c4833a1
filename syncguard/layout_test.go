package syncguard

import (
	"bytes"
	"errors"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
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

// The size limits (issue 28): the library reads in an afternoon, one file
// at a time. Each test logs its figures, and names the file or the packages
// and their lines when it fails.
const (
	maxProductFileLines = 600   // any non-test .go file of a published module
	maxCoreLines        = 5_470 // package syncguard and the internal packages only it imports (5,400 until issue 29 added the notification pool and spacing by place)
	maxCLILines         = 3_940 // cmd/syncguard, every package of the module (3,920 until revoke ended every kind, issue 41; 3,600 until issue 30: run's --permits, -s/-x and several --key on one generalized lock path, their env, status/ls of each kind, setup/schema --all; 3,930 until status/ls read permits and leases through semaphore.List and rwlock.List)
)

// TestProductFileSize: no non-test .go file of a published module is over
// maxProductFileLines lines. A file that grows past it splits along its
// functions, into files whose names say what they hold.
func TestProductFileSize(t *testing.T) {
	tr := loadTree(t)
	longest, longestLines := "", 0
	for _, p := range tr.sortedPackages() {
		if !tr.isPublished(p) {
			continue
		}
		for _, f := range sortedKeys(p.lines) {
			n := p.lines[f]
			if n > longestLines {
				longest, longestLines = path.Join(p.dir, f), n
			}
			if n > maxProductFileLines {
				t.Errorf("%s has %d lines; a product file has at most %d (move whole functions to files of their own)",
					path.Join(p.dir, f), n, maxProductFileLines)
			}
		}
	}
	t.Logf("longest product file: %s, %d lines (at most %d)", longest, longestLines, maxProductFileLines)
}

// TestCoreSize: package syncguard and the internal packages only it
// imports (computed from the imports of the published modules' non-test
// code: see corePackages) hold at most maxCoreLines non-test lines
// together. Moving code to an internal package of its own
// does not make the core smaller.
func TestCoreSize(t *testing.T) {
	tr := loadTree(t)
	core := tr.corePackages()
	total, parts := 0, []string{}
	for _, p := range core {
		n := p.totalLines()
		total += n
		parts = append(parts, fmt.Sprintf("%s %d", p.dir, n))
	}
	summary := fmt.Sprintf("the core (%s) has %d non-test lines; at most %d", strings.Join(parts, ", "), total, maxCoreLines)
	if total > maxCoreLines {
		t.Errorf("%s: %d over", summary, total-maxCoreLines)
	} else {
		t.Log(summary)
	}
}

// TestCLISize: the CLI, every package of the cmd/syncguard module, holds
// at most maxCLILines non-test lines.
func TestCLISize(t *testing.T) {
	tr := loadTree(t)
	total, parts := 0, []string{}
	for _, p := range tr.sortedPackages() {
		if p.module != "cmd/syncguard" {
			continue
		}
		n := p.totalLines()
		total += n
		parts = append(parts, fmt.Sprintf("%s %d", p.dir, n))
	}
	if total == 0 {
		t.Fatal("found no non-test Go file in cmd/syncguard")
	}
	summary := fmt.Sprintf("the CLI (%s) has %d non-test lines; at most %d", strings.Join(parts, ", "), total, maxCLILines)
	if total > maxCLILines {
		t.Errorf("%s: %d over", summary, total-maxCLILines)
	} else {
		t.Log(summary)
	}
}

// maxFileLines bounds every source, script and documentation file of the
// repository (issue 40): one file at a time, each about one thing.
const maxFileLines = 600

// generatedFiles are written by a program and exempt from maxFileLines,
// each with the reason it stays one file.
var generatedFiles = map[string]string{
	"schema.sql": "the DDL for migration tools in one file: SchemaSQL(nil), written by go generate ./syncguard and checked by TestSchemaSQLQuotesAndNames",
}

// TestFileSize: no file of the repository (Go, tests included; SQL;
// Markdown; shell scripts; Makefiles), bench/, tests/, tools/, examples/
// and docs/ included, is over maxFileLines lines, generated files aside.
// A file that grows past it splits along its functions or sections, into
// files whose names say what they hold.
func TestFileSize(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "tools", "release", "modules.go")); errors.Is(err, fs.ErrNotExist) {
		t.Skip("not a checkout of the repository: no tools/release/modules.go")
	}
	checked := func(name string) bool {
		switch path.Ext(name) {
		case ".go", ".sql", ".md", ".sh", ".inc":
			return true
		}
		return name == "Makefile" || name == "run" // .ci/run
	}
	longest, longestLines, files := "", 0, 0
	err = filepath.WalkDir(root, func(file string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, file)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		name := e.Name()
		if e.IsDir() {
			if rel != "." && rel != ".ci" && (name == "testdata" || name == "vendor" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !e.Type().IsRegular() || !checked(name) {
			return nil
		}
		if why, ok := generatedFiles[rel]; ok {
			t.Logf("%s: generated, not checked (%s)", rel, why)
			return nil
		}
		b, err := os.ReadFile(file)
		if err != nil {
			return err
		}
		files++
		n := bytes.Count(b, []byte("\n"))
		if n > longestLines {
			longest, longestLines = rel, n
		}
		if n > maxFileLines {
			t.Errorf("%s has %d lines; a file has at most %d (split it along its functions or sections)", rel, n, maxFileLines)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files == 0 {
		t.Fatal("found no file to check")
	}
	t.Logf("%d files; the longest: %s, %d lines (at most %d)", files, longest, longestLines, maxFileLines)
}

// sourceTree is the repository's Go code as the layout tests see it,
// parsed with go/parser (no go command, so it works with GOWORK=off and the
// oldest supported Go as well).
type sourceTree struct {
	modulePath string             // the core module's path
	published  map[string]bool    // the published modules' directories ("." for the core)
	pkgs       map[string]*srcPkg // by import path
}

// srcPkg is one directory of Go files.
type srcPkg struct {
	dir         string          // relative to the repository root, slash-separated ("." for the root)
	path        string          // import path
	module      string          // the directory of its module
	lines       map[string]int  // non-test file name -> lines
	imports     map[string]bool // imports of the non-test files
	testImports map[string]bool // imports of the _test.go files
}

func (p *srcPkg) totalLines() int {
	n := 0
	for _, l := range p.lines {
		n += l
	}
	return n
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

func (tr *sourceTree) sortedPackages() []*srcPkg {
	out := make([]*srcPkg, 0, len(tr.pkgs))
	for _, k := range sortedKeys(tr.pkgs) {
		out = append(out, tr.pkgs[k])
	}
	return out
}

// isPublished reports whether p is product code: a package with non-test
// files in a published module.
func (tr *sourceTree) isPublished(p *srcPkg) bool { return tr.published[p.module] && len(p.lines) > 0 }

// isInternal reports whether p is one of the core module's internal
// packages (internal/...).
func (tr *sourceTree) isInternal(p *srcPkg) bool {
	return p.module == "." && (p.dir == "internal" || strings.HasPrefix(p.dir, "internal/"))
}

// isCLI reports whether p is the CLI (cmd/syncguard and below).
func (tr *sourceTree) isCLI(p *srcPkg) bool { return underPath(p.dir, "cmd/syncguard") }

// importers returns the published packages whose non-test code imports
// path.
func (tr *sourceTree) importers(path string) []*srcPkg {
	var out []*srcPkg
	for _, p := range tr.sortedPackages() {
		if tr.isPublished(p) && p.imports[path] {
			out = append(out, p)
		}
	}
	return out
}

// corePackages returns package syncguard and the internal packages that
// only it imports: those whose one importer in the published modules'
// non-test code is package syncguard (importers in tests/, tools/ and
// examples/ do not count). An internal package that another one imports as
// well (internal/pooler, by internal/deploy too) is shared, not the core's.
func (tr *sourceTree) corePackages() []*srcPkg {
	corePath := tr.modulePath + "/syncguard"
	out := []*srcPkg{tr.pkgs[corePath]}
	for _, p := range tr.sortedPackages() {
		if !tr.isInternal(p) || len(p.lines) == 0 {
			continue
		}
		if imps := tr.importers(p.path); len(imps) == 1 && imps[0].path == corePath {
			out = append(out, p)
		}
	}
	return out
}

// loadTree reads every Go file of the repository (this package is
// syncguard/ in it), skipping testdata and hidden folders. It skips the
// test outside a checkout (no tools/release, which lists the published
// modules).
func loadTree(t *testing.T) *sourceTree {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	pub, err := publishedModules(filepath.Join(root, "tools", "release", "modules.go"))
	if errors.Is(err, fs.ErrNotExist) {
		t.Skip("not a checkout of the repository: no tools/release/modules.go")
	}
	if err != nil {
		t.Fatal(err)
	}
	tr := &sourceTree{published: map[string]bool{}, pkgs: map[string]*srcPkg{}}
	for _, d := range pub {
		tr.published[d] = true
	}
	modPaths := map[string]string{} // module directory -> module path
	moduleOf := func(dir string) string {
		for d := dir; ; d = path.Dir(d) {
			if _, ok := modPaths[d]; ok || d == "." {
				return d
			}
		}
	}
	fset := token.NewFileSet()
	err = filepath.WalkDir(root, func(file string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, file)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		name := e.Name()
		if e.IsDir() {
			if rel != "." && (name == "testdata" || name == "vendor" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		dir := path.Dir(rel)
		switch {
		case name == "go.mod":
			b, err := os.ReadFile(file)
			if err != nil {
				return err
			}
			for _, l := range strings.Split(string(b), "\n") {
				if f := strings.Fields(l); len(f) == 2 && f[0] == "module" {
					modPaths[dir] = strings.Trim(f[1], `"`)
				}
			}
			if modPaths[dir] == "" {
				return fmt.Errorf("%s: no module line", rel)
			}
		case strings.HasSuffix(name, ".go"):
			b, err := os.ReadFile(file)
			if err != nil {
				return err
			}
			f, err := parser.ParseFile(fset, rel, b, parser.ImportsOnly)
			if err != nil {
				return err
			}
			p := tr.pkgs[dir]
			if p == nil {
				p = &srcPkg{dir: dir, lines: map[string]int{}, imports: map[string]bool{}, testImports: map[string]bool{}}
				tr.pkgs[dir] = p
			}
			imps := p.imports
			if strings.HasSuffix(name, "_test.go") {
				imps = p.testImports
			} else {
				p.lines[name] = bytes.Count(b, []byte("\n"))
			}
			for _, im := range f.Imports {
				ip, err := strconv.Unquote(im.Path.Value)
				if err != nil {
					return err
				}
				imps[ip] = true
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// Key the packages by import path, now that every go.mod is known
	// (WalkDir visits a folder's files in name order: go.mod may come after
	// a .go file).
	byDir := tr.pkgs
	tr.pkgs = map[string]*srcPkg{}
	for dir, p := range byDir {
		p.module = moduleOf(dir)
		p.path = modPaths[p.module]
		if dir != p.module {
			sub := dir
			if p.module != "." {
				sub = strings.TrimPrefix(dir, p.module+"/")
			}
			p.path += "/" + sub
		}
		tr.pkgs[p.path] = p
	}
	tr.modulePath = modPaths["."]
	for d := range tr.published {
		if modPaths[d] == "" {
			t.Fatalf("published module %s (tools/release/modules.go) has no go.mod", d)
		}
	}
	if tr.pkgs[tr.modulePath+"/syncguard"] == nil {
		t.Fatalf("package syncguard not found under %s", root)
	}
	return tr
}

// publishedModules reads the directories of the published modules from
// the release tool's list (var published in tools/release/modules.go),
// their one home.
func publishedModules(file string) ([]string, error) {
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, 0)
	if err != nil {
		return nil, err
	}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.VAR {
			continue
		}
		for _, s := range g.Specs {
			vs := s.(*ast.ValueSpec)
			if len(vs.Names) != 1 || vs.Names[0].Name != "published" || len(vs.Values) != 1 {
				continue
			}
			lit, ok := vs.Values[0].(*ast.CompositeLit)
			if !ok {
				return nil, fmt.Errorf("%s: var published is not a literal", file)
			}
			var out []string
			for _, e := range lit.Elts {
				b, ok := e.(*ast.BasicLit)
				if !ok || b.Kind != token.STRING {
					return nil, fmt.Errorf("%s: var published holds a non-string", file)
				}
				v, err := strconv.Unquote(b.Value)
				if err != nil {
					return nil, err
				}
				out = append(out, v)
			}
			return out, nil
		}
	}
	return nil, fmt.Errorf("%s: no var published", file)
}
