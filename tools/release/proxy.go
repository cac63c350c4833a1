package main

import (
	"bytes"
	"encoding/json"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/mod/modfile"
	modmodule "golang.org/x/mod/module"
	modzip "golang.org/x/mod/zip"
)

// buildProxy writes a file-system GOPROXY (usable as GOPROXY=file://dir)
// holding each of mods at version, made from the working tree: module zips
// as `go mod download` expects them (golang.org/x/mod/zip), with sibling
// requirements set to version in the go.mod inside the zip and beside it.
func (ws *workspace) buildProxy(dir, version string, mods []module) error {
	for _, m := range mods {
		gomod, err := rewriteRequires(m.File, version)
		if err != nil {
			return err
		}
		esc, err := modmodule.EscapePath(m.Path)
		if err != nil {
			return err
		}
		vdir := filepath.Join(dir, filepath.FromSlash(esc), "@v")
		if err := os.MkdirAll(vdir, 0o755); err != nil {
			return err
		}
		info, _ := json.Marshal(struct {
			Version string
			Time    time.Time
		}{version, time.Now().UTC().Truncate(time.Second)})
		files := map[string][]byte{
			"list":            []byte(version + "\n"),
			version + ".info": info,
			version + ".mod":  gomod,
		}
		for name, data := range files {
			if err := os.WriteFile(filepath.Join(vdir, name), data, 0o644); err != nil {
				return err
			}
		}
		zf, err := os.Create(filepath.Join(vdir, version+".zip"))
		if err != nil {
			return err
		}
		srcs, err := moduleFiles(filepath.Join(ws.Root, m.Dir), gomod)
		if err != nil {
			zf.Close()
			return err
		}
		if err := modzip.Create(zf, modmodule.Version{Path: m.Path, Version: version}, srcs); err != nil {
			zf.Close()
			return err
		}
		if err := zf.Close(); err != nil {
			return err
		}
	}
	return nil
}

// rewriteRequires returns f formatted with every sibling requirement at
// version (f itself is not changed).
func rewriteRequires(f *modfile.File, version string) ([]byte, error) {
	data, err := f.Format()
	if err != nil {
		return nil, err
	}
	c, err := modfile.Parse("go.mod", data, nil)
	if err != nil {
		return nil, err
	}
	for _, r := range c.Require {
		if isSibling(r.Mod.Path) {
			if err := c.AddRequire(r.Mod.Path, version); err != nil {
				return nil, err
			}
		}
	}
	c.Cleanup()
	return c.Format()
}

// moduleFiles lists the files of the module rooted at root the way the go
// command packs them: nested modules, VCS directories and go.work are left
// out; go.mod is replaced by gomod.
func moduleFiles(root string, gomod []byte) ([]modzip.File, error) {
	var files []modzip.File
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel == "." {
				return nil
			}
			if strings.HasPrefix(d.Name(), ".") || d.Name() == "vendor" {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
				return filepath.SkipDir // a nested module
			}
			return nil
		}
		if !d.Type().IsRegular() || rel == "go.work" || rel == "go.work.sum" || rel == ".git" {
			return nil
		}
		if rel == "go.mod" {
			files = append(files, memFile{name: rel, data: gomod})
			return nil
		}
		files = append(files, diskFile{name: rel, path: path})
		return nil
	})
	return files, err
}

type diskFile struct{ name, path string }

func (f diskFile) Path() string                 { return f.name }
func (f diskFile) Lstat() (os.FileInfo, error)  { return os.Lstat(f.path) }
func (f diskFile) Open() (io.ReadCloser, error) { return os.Open(f.path) }

type memFile struct {
	name string
	data []byte
}

func (f memFile) Path() string { return f.name }
func (f memFile) Lstat() (os.FileInfo, error) {
	return memInfo{name: filepath.Base(f.name), size: int64(len(f.data))}, nil
}
func (f memFile) Open() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(f.data)), nil }

type memInfo struct {
	name string
	size int64
}

func (i memInfo) Name() string       { return i.name }
func (i memInfo) Size() int64        { return i.size }
func (i memInfo) Mode() fs.FileMode  { return 0o644 }
func (i memInfo) ModTime() time.Time { return time.Time{} }
func (i memInfo) IsDir() bool        { return false }
func (i memInfo) Sys() any           { return nil }
