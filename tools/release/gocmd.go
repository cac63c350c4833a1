package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// goEnv is an environment for the go command outside the workspace: no
// go.work, modules resolved through proxy (a file-system GOPROXY) first, then
// the usual proxy, our own module path exempt from the checksum database (as
// for a private module), and modcache, when set, as the module cache.
func goEnv(proxy, modcache string) []string {
	upstream := strings.TrimSpace(goOutput("env", "GOPROXY"))
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "GOWORK", "GOFLAGS", "GOPROXY", "GONOSUMDB", "GOPRIVATE", "GONOPROXY", "GOMODCACHE", "CI":
			continue
		}
		env = append(env, kv)
	}
	env = append(env,
		"GOWORK=off",
		"GOFLAGS=-modcacherw",
		"GOPROXY=file://"+filepath.ToSlash(proxy)+","+upstream,
		"GONOSUMDB="+modulePath,
		// Not a CI job for the consumer's tests (conformance.InCI: CI=false
		// wins over GITHUB_ACTIONS and the other services' markers), so its
		// conformance test without a DSN skips as on a laptop.
		"CI=false",
	)
	if modcache != "" {
		env = append(env, "GOMODCACHE="+modcache)
	}
	return env
}

func goOutput(args ...string) string {
	out, err := exec.Command("go", args...).Output()
	if err != nil {
		fail(fmt.Errorf("go %s: %v", strings.Join(args, " "), err))
	}
	return string(out)
}

// run runs name args in dir with env, echoing the command; its output is
// shown only when it fails.
func run(dir string, env []string, name string, args ...string) (string, error) {
	fmt.Printf("  $ %s %s\n", name, strings.Join(args, " "))
	cmd := exec.Command(name, args...)
	cmd.Dir, cmd.Env = dir, env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("%s %s (in %s): %v\n%s", name, strings.Join(args, " "), dir, err, out.String())
	}
	return out.String(), nil
}
