// Command release keeps the repository's modules releasable: it sets the
// version at which the published modules require each other, prints the
// tags a release needs, tidies every module without replace directives, and
// checks a simulated release the way a downstream user meets it.
//
//	go run ./tools/release version v0.2.0   # set sibling requirements, print tags
//	go run ./tools/release tidy              # go mod tidy of every module
//	go run ./tools/release check             # make release-check
//	go run ./tools/release proxy DIR         # file-system GOPROXY of the tree
//
// Run it from the repository root (the Makefile does). docs/release.md
// explains the tag scheme and the order.
package main

import (
	"fmt"
	"os"
	"path/filepath"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	root, err := repoRoot()
	if err != nil {
		fail(err)
	}
	ws, err := loadWorkspace(root)
	if err != nil {
		fail(err)
	}
	switch os.Args[1] {
	case "version":
		if len(os.Args) != 3 {
			usage()
		}
		v := os.Args[2]
		if err := ws.setVersion(v); err != nil {
			fail(err)
		}
		fmt.Printf("Sibling requirements and go.work replace lines set to %s.\n", v)
		fmt.Println("Next: make tidy, commit, then create and push these tags, in this order, on that commit:")
		for _, t := range ws.tags(v) {
			fmt.Printf("  git tag %s\n", t)
		}
		fmt.Println("  git push origin " + joinTags(ws.tags(v)))
	case "tags":
		v, err := ws.currentVersion()
		if err != nil {
			fail(err)
		}
		for _, t := range ws.tags(v) {
			fmt.Println(t)
		}
	case "tidy":
		if err := ws.tidy(); err != nil {
			fail(err)
		}
	case "proxy":
		if len(os.Args) != 3 {
			usage()
		}
		v, err := ws.currentVersion()
		if err != nil {
			fail(err)
		}
		if err := ws.buildProxy(os.Args[2], v, ws.publishedModules()); err != nil {
			fail(err)
		}
		fmt.Printf("GOPROXY=file://%s holds the published modules at %s\n", os.Args[2], v)
	case "check":
		if err := ws.check(); err != nil {
			fail(err)
		}
	default:
		usage()
	}
}

func (ws *workspace) publishedModules() []module {
	var out []module
	for _, d := range published {
		m, _ := ws.module(d)
		out = append(out, m)
	}
	return out
}

func joinTags(tags []string) string {
	s := ""
	for i, t := range tags {
		if i > 0 {
			s += " "
		}
		s += t
	}
	return s
}

// repoRoot is the nearest directory upwards holding go.work.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.work above the current directory")
		}
		dir = parent
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: release version vX.Y.Z | tags | tidy | proxy DIR | check")
	os.Exit(2)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "release:", err)
	os.Exit(1)
}
