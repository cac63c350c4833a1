package syncguard

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"sort"
	"strings"
	"testing"
)

// maxExported bounds the public API of package syncguard: exported
// package-level types, functions, constants and variables (methods and
// struct fields not counted). docs/changes.md lists what was folded away
// to get here; grow it only for a name users cannot do without. 60 since
// issue 40: the telemetry (TelemetryBackend, TelemetryOptions, LockEvent,
// WithTelemetry, SlogSink, the seven event types) moved to package
// telemetry, behind the one hook (Tracer, TraceOp, TraceLock). 52: the
// eight codes are their own sentinels (ErrAborted is a Code; the Code*
// constants went). 45: the deployment doctor is package doctor
// (CheckDeployment, Report, Finding), Revoke a method of Backend,
// LockInfoDebug folded into LockInfo, and Lock's queue (Queuer, Waiter)
// is internal/kit's.
const maxExported = 45

// parsePackage parses the non-test files of this package.
func parsePackage(t *testing.T) (*token.FileSet, map[string]*ast.File) {
	t.Helper()
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, ".", func(fi fs.FileInfo) bool {
		return !strings.HasSuffix(fi.Name(), "_test.go")
	}, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	return fset, pkgs["syncguard"].Files
}

// exportedNames lists the exported package-level names, each with whether
// it has a doc comment (on the spec or on its declaration group).
func exportedNames(files map[string]*ast.File) map[string]bool {
	names := map[string]bool{}
	for _, f := range files {
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil && d.Name.IsExported() {
					names[d.Name.Name] = d.Doc != nil
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						if s.Name.IsExported() {
							names[s.Name.Name] = s.Doc != nil || d.Doc != nil
						}
					case *ast.ValueSpec:
						for _, n := range s.Names {
							if n.IsExported() {
								names[n.Name] = s.Doc != nil || s.Comment != nil || d.Doc != nil
							}
						}
					}
				}
			}
		}
	}
	return names
}

func TestPublicAPISize(t *testing.T) {
	_, files := parsePackage(t)
	names := exportedNames(files)
	if len(names) > maxExported {
		list := make([]string, 0, len(names))
		for n := range names {
			list = append(list, n)
		}
		sort.Strings(list)
		t.Errorf("package syncguard exports %d package-level names, at most %d allowed: %s",
			len(names), maxExported, strings.Join(list, " "))
	}
	t.Logf("%d exported package-level names", len(names))
}

// Every exported name, and every exported method, has a doc comment.
func TestPublicAPIDocumented(t *testing.T) {
	fset, files := parsePackage(t)
	for name, documented := range exportedNames(files) {
		if !documented {
			t.Errorf("exported %s has no doc comment", name)
		}
	}
	for _, f := range files {
		for _, d := range f.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok && fd.Recv != nil && fd.Name.IsExported() && fd.Doc == nil {
				t.Errorf("%s: exported method %s has no doc comment", fset.Position(fd.Pos()), fd.Name.Name)
			}
		}
	}
}

// Every embedded statement file renders: no unknown template name, no
// fragment with the wrong arguments.
func TestStatementsRender(t *testing.T) {
	entries, err := sqlFiles.ReadDir("sql")
	if err != nil || len(entries) == 0 {
		t.Fatalf("no embedded statements: %v", err)
	}
	for _, e := range entries {
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("%s: %v", e.Name(), r)
				}
			}()
			if s := render(e.Name(), "t1", "t2"); strings.Contains(s, "{{") || !strings.Contains(s, `"t1"`) && !strings.Contains(s, `"t2"`) {
				t.Errorf("%s rendered to %q", e.Name(), s)
			}
		}()
	}
}
