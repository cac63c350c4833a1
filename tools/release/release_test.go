package main

import (
	"archive/zip"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"golang.org/x/mod/modfile"
)

// fakeRepo writes a small multi-module repository shaped like ours.
func fakeRepo(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	files := map[string]string{
		"go.work":               "go 1.26.0\n\nuse (\n\t.\n\t./pq\n\t./pgxstd\n\t./otelsyncguard\n\t./cmd/syncguard\n\t./tests/itest\n)\n\nreplace github.com/syncguard/syncguard-go v0.1.0 => ./\n",
		"go.mod":                "module github.com/syncguard/syncguard-go\n\ngo 1.25.0\n",
		"syncguard/a.go":        "package syncguard\n",
		"pq/go.mod":             "module github.com/syncguard/syncguard-go/pq\n\ngo 1.25.0\n\nrequire github.com/syncguard/syncguard-go v0.1.0\n",
		"pq/pq.go":              "package pq\n",
		"otelsyncguard/go.mod":  "module github.com/syncguard/syncguard-go/otelsyncguard\n\ngo 1.25.0\n\nrequire github.com/syncguard/syncguard-go v0.1.0\n",
		"pgxstd/go.mod":         "module github.com/syncguard/syncguard-go/pgxstd\n\ngo 1.25.0\n\nrequire github.com/syncguard/syncguard-go v0.1.0\n",
		"cmd/syncguard/go.mod":  "module github.com/syncguard/syncguard-go/cmd/syncguard\n\ngo 1.25.0\n\nrequire (\n\tgithub.com/syncguard/syncguard-go v0.1.0\n\tgithub.com/syncguard/syncguard-go/pgxstd v0.1.0\n)\n",
		"tests/itest/go.mod":    "module github.com/syncguard/syncguard-go/tests/itest\n\ngo 1.26.0\n\nrequire (\n\tgithub.com/syncguard/syncguard-go v0.1.0\n\tgithub.com/syncguard/syncguard-go/pq v0.1.0\n)\n",
		"tests/itest/x_test.go": "package itest\n",
	}
	for name, data := range files {
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestSetVersionRewritesEverySiblingAndGoWork(t *testing.T) {
	root := fakeRepo(t)
	ws, err := loadWorkspace(root)
	if err != nil {
		t.Fatal(err)
	}
	if err := ws.setVersion("v0.2.0"); err != nil {
		t.Fatal(err)
	}
	ws, err = loadWorkspace(root)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := ws.currentVersion(); err != nil || v != "v0.2.0" {
		t.Fatalf("currentVersion = %q, %v; want v0.2.0", v, err)
	}
	var replaced []string
	for _, r := range ws.Work.Replace {
		replaced = append(replaced, r.Old.Path+"@"+r.Old.Version+"=>"+r.New.Path)
	}
	sort.Strings(replaced)
	want := []string{
		"github.com/syncguard/syncguard-go/pgxstd@v0.2.0=>./pgxstd",
		"github.com/syncguard/syncguard-go/pq@v0.2.0=>./pq",
		"github.com/syncguard/syncguard-go@v0.2.0=>./",
	}
	if !reflect.DeepEqual(replaced, want) {
		t.Fatalf("go.work replace lines = %v, want %v", replaced, want)
	}
	if got, want := ws.tags("v0.2.0"), []string{"v0.2.0", "pq/v0.2.0", "pgxstd/v0.2.0", "otelsyncguard/v0.2.0", "cmd/syncguard/v0.2.0"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("tags = %v, want %v (core first, CLI last)", got, want)
	}
}

func TestSetVersionRejectsNonsense(t *testing.T) {
	ws, err := loadWorkspace(fakeRepo(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"0.2.0", "v2.0.0", "v0.2.0+meta", "latest"} {
		if err := ws.setVersion(v); err == nil {
			t.Errorf("setVersion(%q) succeeded, want an error", v)
		}
	}
}

func TestCurrentVersionDisagreementIsAnError(t *testing.T) {
	root := fakeRepo(t)
	p := filepath.Join(root, "pq", "go.mod")
	data, _ := os.ReadFile(p)
	os.WriteFile(p, []byte(strings.Replace(string(data), "v0.1.0", "v0.0.9", 1)), 0o644)
	ws, err := loadWorkspace(root)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ws.currentVersion(); err == nil {
		t.Fatal("currentVersion with v0.0.9 and v0.1.0 requirements: no error")
	}
}

func TestProxyZipLeavesOutNestedModulesAndRewritesGoMod(t *testing.T) {
	root := fakeRepo(t)
	ws, err := loadWorkspace(root)
	if err != nil {
		t.Fatal(err)
	}
	proxy := t.TempDir()
	if err := ws.buildProxy(proxy, "v0.3.0-rc.1", ws.publishedModules()); err != nil {
		t.Fatal(err)
	}
	z, err := zip.OpenReader(filepath.Join(proxy, "github.com/syncguard/syncguard-go/@v/v0.3.0-rc.1.zip"))
	if err != nil {
		t.Fatal(err)
	}
	defer z.Close()
	var names []string
	for _, f := range z.File {
		names = append(names, strings.TrimPrefix(f.Name, "github.com/syncguard/syncguard-go@v0.3.0-rc.1/"))
	}
	sort.Strings(names)
	if want := []string{"go.mod", "syncguard/a.go"}; !reflect.DeepEqual(names, want) {
		t.Fatalf("core zip holds %v, want %v (no nested modules, no go.work)", names, want)
	}
	data, err := os.ReadFile(filepath.Join(proxy, "github.com/syncguard/syncguard-go/cmd/syncguard/@v/v0.3.0-rc.1.mod"))
	if err != nil {
		t.Fatal(err)
	}
	f, err := modfile.Parse("go.mod", data, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range f.Require {
		if r.Mod.Version != "v0.3.0-rc.1" {
			t.Errorf("cmd/syncguard.mod requires %s at %s, want v0.3.0-rc.1", r.Mod.Path, r.Mod.Version)
		}
	}
}

// A published module that requires a module of tests/, tools/ or examples/
// (anything not published) fails the check before anything is built.
func TestCheckRejectsPublishedRequiringTestMachinery(t *testing.T) {
	root := fakeRepo(t)
	gm := filepath.Join(root, "pq", "go.mod")
	if err := os.WriteFile(gm, []byte("module github.com/syncguard/syncguard-go/pq\n\ngo 1.25.0\n\nrequire (\n\tgithub.com/syncguard/syncguard-go v0.1.0\n\tgithub.com/syncguard/syncguard-go/tests/itest v0.1.0\n)\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ws, err := loadWorkspace(root)
	if err != nil {
		t.Fatal(err)
	}
	if err := ws.check(); err == nil || !strings.Contains(err.Error(), "tests/itest, which is not published") {
		t.Fatalf("want the check to name the unpublished requirement; got %v", err)
	}
}
