package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// depsStubs writes stand-ins for the system programs scripts/deps.sh uses
// (id, dpkg, apt-get, pg_lsclusters, pg_ctlcluster, service, psql,
// pgbouncer) into a directory to put first on PATH. Their state lives in
// files under state: "cluster" and "pgbouncer" hold "online" or "down";
// apt-get sets each to what "cluster-after-install" and
// "pgbouncer-after-install" say (if present) and marks the extra packages
// installed; every call is appended to "calls".
func depsStubs(t *testing.T, state string) string {
	t.Helper()
	bin := t.TempDir()
	stubs := map[string]string{
		"id":        `case "$1" in -u) echo 0;; *) exit 0;; esac`,
		"dpkg":      `[ -f "$STATE/installed" ]`, // extra packages: missing until apt-get installs them
		"psql":      `exit 0`,
		"pgbouncer": `exit 0`,
		"apt-get": `echo "apt-get $*" >> "$STATE/calls"
if [ "$1" = install ]; then
  touch "$STATE/installed"
  for s in cluster pgbouncer; do
    [ ! -f "$STATE/$s-after-install" ] || cp "$STATE/$s-after-install" "$STATE/$s"
  done
fi`,
		"pg_lsclusters": `[ "$1" = -h ] || exit 2
echo "15 main 5432 $(cat "$STATE/cluster") postgres /var/lib/postgresql/15/main /var/log/postgresql/postgresql-15-main.log"`,
		"pg_ctlcluster": `echo "pg_ctlcluster $*" >> "$STATE/calls"; [ "$3" != stop ] || echo down > "$STATE/cluster"`,
		"service": `echo "service $*" >> "$STATE/calls"
case "$2" in
  status) [ "$(cat "$STATE/pgbouncer")" = online ];;
  stop) echo down > "$STATE/pgbouncer";;
esac`,
	}
	for name, body := range stubs {
		if err := os.WriteFile(filepath.Join(bin, name), []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return bin
}

// TestDepsStopsOnlyWhatItsInstallationStarted runs scripts/deps.sh with
// stand-ins for the package manager and the service tools: a cluster or a
// pgbouncer service that was running before the installation stays
// running; one that the installation started is stopped again; with
// nothing missing, nothing is installed or stopped.
func TestDepsStopsOnlyWhatItsInstallationStarted(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Fatalf("bash is needed to run scripts/deps.sh: %v", err)
	}
	script, err := filepath.Abs("../../scripts/deps.sh")
	if err != nil {
		t.Fatal(err)
	}
	pgbin := t.TempDir() // a PostgreSQL server is "installed" here
	if err := os.WriteFile(filepath.Join(pgbin, "initdb"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name                      string
		extra                     string // SYNCGUARD_EXTRA_PACKAGES: what is missing
		cluster, clusterAfter     string
		pgbouncer, pgbouncerAfter string
		wantStopped, wantKept     []string // calls that must / must not happen
	}{
		{name: "running before stays running", extra: "some-package",
			cluster: "online", clusterAfter: "online", pgbouncer: "online", pgbouncerAfter: "online",
			wantKept: []string{"pg_ctlcluster 15 main stop", "service pgbouncer stop"}},
		{name: "started by the installation is stopped", extra: "some-package",
			cluster: "down", clusterAfter: "online", pgbouncer: "down", pgbouncerAfter: "online",
			wantStopped: []string{"pg_ctlcluster 15 main stop", "service pgbouncer stop"}},
		{name: "down before and after is left alone", extra: "some-package",
			cluster: "down", clusterAfter: "down", pgbouncer: "down", pgbouncerAfter: "down",
			wantKept: []string{"pg_ctlcluster 15 main stop", "service pgbouncer stop"}},
		{name: "nothing missing installs and stops nothing", extra: "",
			cluster: "online", clusterAfter: "down", pgbouncer: "online", pgbouncerAfter: "down",
			wantKept: []string{"apt-get", "pg_ctlcluster", "service pgbouncer stop"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			state := t.TempDir()
			write := func(name, v string) {
				if err := os.WriteFile(filepath.Join(state, name), []byte(v+"\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			write("cluster", c.cluster)
			write("cluster-after-install", c.clusterAfter)
			write("pgbouncer", c.pgbouncer)
			write("pgbouncer-after-install", c.pgbouncerAfter)
			write("calls", "")
			bin := depsStubs(t, state)
			for _, run := range []int{1, 2} { // idempotent: the same on a second run
				cmd := exec.Command("bash", script, "test")
				cmd.Env = append(os.Environ(),
					"PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"),
					"STATE="+state,
					"PGBIN="+pgbin,
					"SYNCGUARD_EXTRA_PACKAGES="+c.extra,
					"SYNCGUARD_POLICY_RC="+filepath.Join(state, "policy-rc.d"),
				)
				out, err := cmd.CombinedOutput()
				if err != nil {
					t.Fatalf("run %d: scripts/deps.sh: %v\n%s", run, err, out)
				}
				if _, err := os.Stat(filepath.Join(state, "policy-rc.d")); !os.IsNotExist(err) {
					t.Errorf("run %d: the policy-rc.d it wrote was not removed (stat: %v)", run, err)
				}
			}
			data, err := os.ReadFile(filepath.Join(state, "calls"))
			if err != nil {
				t.Fatal(err)
			}
			calls := string(data)
			for _, w := range c.wantStopped {
				if strings.Count(calls, w) != 1 {
					t.Errorf("want %q exactly once; calls:\n%s", w, calls)
				}
			}
			for _, w := range c.wantKept {
				if strings.Contains(calls, w) {
					t.Errorf("want no %q; calls:\n%s", w, calls)
				}
			}
		})
	}
}
