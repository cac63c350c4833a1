package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	modmodule "golang.org/x/mod/module"
)

// tidy runs `go mod tidy` in every module of the workspace outside
// workspace mode, with the siblings served at the current version from a
// file-system proxy of this working tree, so that each go.mod lists exactly
// what the module needs without replace directives. The siblings' own hashes
// are left out of go.sum: they change with every commit and the workspace
// never checks them (consumers get them from the proxy they download from).
func (ws *workspace) tidy() error {
	v, err := ws.currentVersion()
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "syncguard-tidy-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if err := ws.buildProxy(filepath.Join(tmp, "proxy"), v, ws.Modules); err != nil {
		return err
	}
	// The module cache must not serve an older copy of the same version.
	if err := forgetSiblings(strings.TrimSpace(goOutput("env", "GOMODCACHE"))); err != nil {
		return err
	}
	// The working tree is served at the same version every time, so the
	// go command's index of module cache directories (kept in GOCACHE, and
	// assumed never to change for a version) must start empty too.
	env := append(goEnv(filepath.Join(tmp, "proxy"), ""), "GOCACHE="+filepath.Join(tmp, "gocache"))
	for _, m := range ws.Modules {
		fmt.Printf("tidy %s\n", m.Dir)
		dir := filepath.Join(ws.Root, m.Dir)
		if _, err := run(dir, env, "go", "mod", "tidy"); err != nil {
			return err
		}
		if err := dropSiblingSums(filepath.Join(dir, "go.sum")); err != nil {
			return err
		}
	}
	return forgetSiblings(strings.TrimSpace(goOutput("env", "GOMODCACHE")))
}

// forgetSiblings removes this repository's modules from the module cache.
func forgetSiblings(modcache string) error {
	esc, _ := modmodule.EscapePath(modulePath)
	for _, p := range []string{
		filepath.Join(modcache, filepath.FromSlash(esc)),
		filepath.Join(modcache, filepath.FromSlash(esc)+"@*"),
		filepath.Join(modcache, "cache", "download", filepath.FromSlash(esc)),
	} {
		matches, _ := filepath.Glob(p)
		for _, m := range matches {
			if err := os.RemoveAll(m); err != nil {
				return err
			}
		}
	}
	return nil
}

func dropSiblingSums(path string) error {
	data, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil
	} else if err != nil {
		return err
	}
	var out bytes.Buffer
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) > 0 && isSibling(f[0]) {
			continue
		}
		out.WriteString(sc.Text() + "\n")
	}
	if out.Len() == 0 {
		return os.Remove(path)
	}
	return os.WriteFile(path, out.Bytes(), 0o644)
}
