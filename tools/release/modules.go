package main

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/semver"
)

// modulePath is the path of the core module; every sibling's path starts
// with it.
const modulePath = "github.com/syncguard/syncguard-go"

// published lists the modules users fetch or install, in the order they must
// be tagged: a module's tag comes after the tags of the siblings it requires.
var published = []string{".", "pq", "pgxstd", "otelsyncguard", "cmd/syncguard"}

// module is one go.mod of the repository.
type module struct {
	Dir  string // relative to the repository root, "." for the core
	Path string // module path
	File *modfile.File
}

// tagPrefix is the git tag prefix of a module in a multi-module repository:
// "" for the root, "pq/" for the pq module.
func (m module) tagPrefix() string {
	if m.Dir == "." {
		return ""
	}
	return filepath.ToSlash(m.Dir) + "/"
}

// isPublished reports whether m is one of the published modules.
func (m module) isPublished() bool {
	for _, d := range published {
		if d == m.Dir {
			return true
		}
	}
	return false
}

// workspace is the repository's go.work and the modules it uses.
type workspace struct {
	Root    string
	Work    *modfile.WorkFile
	Modules []module
}

// loadWorkspace reads root/go.work and every go.mod it uses.
func loadWorkspace(root string) (*workspace, error) {
	data, err := os.ReadFile(filepath.Join(root, "go.work"))
	if err != nil {
		return nil, err
	}
	wf, err := modfile.ParseWork("go.work", data, nil)
	if err != nil {
		return nil, err
	}
	ws := &workspace{Root: root, Work: wf}
	for _, u := range wf.Use {
		dir := filepath.Clean(u.Path)
		gm := filepath.Join(root, dir, "go.mod")
		data, err := os.ReadFile(gm)
		if err != nil {
			return nil, err
		}
		f, err := modfile.Parse(gm, data, nil)
		if err != nil {
			return nil, err
		}
		ws.Modules = append(ws.Modules, module{Dir: filepath.ToSlash(dir), Path: f.Module.Mod.Path, File: f})
	}
	sort.Slice(ws.Modules, func(i, j int) bool { return ws.Modules[i].Dir < ws.Modules[j].Dir })
	for _, d := range published {
		if _, ok := ws.module(d); !ok {
			return nil, fmt.Errorf("go.work does not use published module %s", d)
		}
	}
	return ws, nil
}

func (ws *workspace) module(dir string) (module, bool) {
	for _, m := range ws.Modules {
		if m.Dir == dir {
			return m, true
		}
	}
	return module{}, false
}

// isSibling reports whether path is a module of this repository.
func isSibling(path string) bool {
	return path == modulePath || strings.HasPrefix(path, modulePath+"/")
}

// currentVersion is the version at which the published modules require
// each other now (they must agree).
func (ws *workspace) currentVersion() (string, error) {
	v := ""
	for _, m := range ws.Modules {
		for _, r := range m.File.Require {
			if !isSibling(r.Mod.Path) {
				continue
			}
			if v == "" {
				v = r.Mod.Version
			} else if v != r.Mod.Version {
				return "", fmt.Errorf("%s/go.mod requires %s at %s, others at %s: run `make release VERSION=...` to set one version", m.Dir, r.Mod.Path, r.Mod.Version, v)
			}
		}
	}
	if v == "" {
		return "", fmt.Errorf("no module requires a sibling")
	}
	return v, nil
}

// setVersion rewrites every sibling requirement of every module, and the
// version-pinned replace lines of go.work, to version.
func (ws *workspace) setVersion(version string) error {
	if !semver.IsValid(version) || semver.Build(version) != "" || semver.Major(version) != "v0" && semver.Major(version) != "v1" {
		return fmt.Errorf("version %q: want a semantic version vX.Y.Z (v0 or v1; a v2 needs /v2 module paths)", version)
	}
	for _, m := range ws.Modules {
		changed := false
		for _, r := range m.File.Require {
			if isSibling(r.Mod.Path) && r.Mod.Version != version {
				if err := m.File.AddRequire(r.Mod.Path, version); err != nil {
					return err
				}
				changed = true
			}
		}
		if !changed {
			continue
		}
		m.File.Cleanup()
		out, err := m.File.Format()
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(ws.Root, m.Dir, "go.mod"), out, 0o644); err != nil {
			return err
		}
	}
	// go.work: replace each sibling at the new version by its directory.
	for _, r := range append([]*modfile.Replace(nil), ws.Work.Replace...) {
		if isSibling(r.Old.Path) {
			if err := ws.Work.DropReplace(r.Old.Path, r.Old.Version); err != nil {
				return err
			}
		}
	}
	for _, m := range ws.Modules {
		if !ws.required(m.Path) {
			continue
		}
		rel := "./" + m.Dir
		if m.Dir == "." {
			rel = "./"
		}
		if err := ws.Work.AddReplace(m.Path, version, rel, ""); err != nil {
			return err
		}
	}
	ws.Work.Cleanup()
	return os.WriteFile(filepath.Join(ws.Root, "go.work"), modfile.Format(ws.Work.Syntax), 0o644)
}

// required reports whether any module of the workspace requires path.
func (ws *workspace) required(path string) bool {
	for _, m := range ws.Modules {
		for _, r := range m.File.Require {
			if r.Mod.Path == path {
				return true
			}
		}
	}
	return false
}

// tags returns the git tags a release of version needs, in push order.
func (ws *workspace) tags(version string) []string {
	var out []string
	for _, d := range published {
		m, _ := ws.module(d)
		out = append(out, m.tagPrefix()+version)
	}
	return out
}
