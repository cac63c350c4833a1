package cli

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
)

// modulePath is the module of the syncguard command; corePath the
// library's module.
const (
	modulePath = "github.com/syncguard/syncguard-go/cmd/syncguard"
	corePath   = "github.com/syncguard/syncguard-go"
)

// buildInfo is what `syncguard version` prints, from the binary's build
// information: the module's version (`go install ...@VERSION`, or the VCS
// tag or commit of a checkout), the library's, and the Go toolchain.
type buildInfo struct {
	Version     string `json:"version"`
	Module      string `json:"module"`
	Library     string `json:"library,omitempty"`
	GoVersion   string `json:"goVersion"`
	Platform    string `json:"platform"`
	VCSRevision string `json:"vcsRevision,omitempty"`
	VCSTime     string `json:"vcsTime,omitempty"`
	VCSModified bool   `json:"vcsModified,omitempty"`
}

func readBuildInfo(bi *debug.BuildInfo, ok bool) buildInfo {
	out := buildInfo{Version: "(devel)", Module: modulePath, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if !ok || bi == nil {
		out.Version = "(unknown: built without module information)"
		return out
	}
	if bi.GoVersion != "" {
		out.GoVersion = bi.GoVersion
	}
	// An embedding program (cli.Main in another main module) reports the
	// cmd/syncguard module as a dependency.
	main := &bi.Main
	if i := slices.IndexFunc(bi.Deps, func(d *debug.Module) bool { return d.Path == modulePath }); main.Path != modulePath && i >= 0 {
		main = bi.Deps[i]
	}
	if main.Version != "" {
		out.Version = main.Version
	}
	for _, d := range bi.Deps {
		if d.Path == corePath {
			out.Library = d.Version
			if d.Replace != nil {
				if d.Replace.Version != "" {
					out.Library = d.Replace.Version
				} else {
					out.Library += " (replaced by " + d.Replace.Path + ")"
				}
			}
		}
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			out.VCSRevision = s.Value
		case "vcs.time":
			out.VCSTime = s.Value
		case "vcs.modified":
			out.VCSModified = s.Value == "true"
		}
	}
	return out
}

// text is the one-line form: "syncguard v1.2.3 (library v1.2.3, go1.26.0
// linux/amd64)", with the commit for a checkout build.
func (b buildInfo) text() string {
	var extra []string
	if b.Library != "" {
		extra = append(extra, "library "+b.Library)
	}
	if b.VCSRevision != "" {
		rev := b.VCSRevision[:min(len(b.VCSRevision), 12)]
		if b.VCSModified {
			rev += "+dirty"
		}
		extra = append(extra, "commit "+rev)
	}
	extra = append(extra, b.GoVersion+" "+b.Platform)
	return fmt.Sprintf("syncguard %s (%s)", b.Version, strings.Join(extra, ", "))
}

func (a *app) cmdVersion(args []string) error {
	if err := a.parseNoArgs(a.flagSet("version"), args, `
Prints the version of syncguard (the module version that 'go install
...@VERSION' or a release build records, or the commit of a checkout build),
the library version it was built with, and the Go version and platform.
--version does the same.`); err != nil {
		return err
	}
	b := readBuildInfo(debug.ReadBuildInfo())
	if a.json {
		return writeJSON(a.stdout, b)
	}
	_, err := fmt.Fprintln(a.stdout, b.text())
	return err
}
