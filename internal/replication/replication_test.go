package replication

import (
	"strings"
	"testing"
)

func find(fs []Finding, check string) (Finding, bool) {
	for _, f := range fs {
		if f.Check == check {
			return f, true
		}
	}
	return Finding{}, false
}

func TestFindings(t *testing.T) {
	quorum := []Standby{{Name: "pgautofailover_standby_2", State: "streaming", SyncState: "quorum"}}
	async := []Standby{{Name: "replica1", State: "streaming", SyncState: "async"}}
	cases := []struct {
		name string
		s    Status
		// want: check -> severity; mention: text each non-OK finding's
		// Detail+Fix must contain.
		want    map[string]Severity
		mention []string
	}{
		{name: "standby", s: Status{InRecovery: true, SynchronousCommit: "on"},
			want: map[string]Severity{CheckPrimary: Fail}, mention: []string{"target_session_attrs=read-write", "25006"}},
		{name: "single server", s: Status{SynchronousCommit: "on"},
			want: map[string]Severity{CheckPrimary: OK, CheckStandbys: OK}},
		{name: "synchronous standby", s: Status{SynchronousCommit: "on", SynchronousStandbyNames: "ANY 1 (pgautofailover_standby_2)", Standbys: quorum},
			want: map[string]Severity{CheckPrimary: OK, CheckStandbys: OK, CheckCommit: OK}},
		{name: "remote_apply", s: Status{SynchronousCommit: "remote_apply", SynchronousStandbyNames: "s1", Standbys: []Standby{{Name: "s1", SyncState: "sync"}}},
			want: map[string]Severity{CheckStandbys: OK, CheckCommit: OK}},
		{name: "asynchronous standby", s: Status{SynchronousCommit: "on", Standbys: async},
			want: map[string]Severity{CheckStandbys: Warn, CheckCommit: OK}, mention: []string{"synchronous_standby_names", "replica1", "fence"}},
		{name: "synchronous_commit local", s: Status{SynchronousCommit: "local", SynchronousStandbyNames: "ANY 1 (s1)", Standbys: []Standby{{Name: "s1", SyncState: "quorum"}}},
			want: map[string]Severity{CheckStandbys: OK, CheckCommit: Warn}, mention: []string{"synchronous_commit = local", "synchronous_commit = on"}},
		{name: "names match no standby", s: Status{SynchronousCommit: "on", SynchronousStandbyNames: "FIRST 1 (other)", Standbys: async},
			want: map[string]Severity{CheckStandbys: Warn}, mention: []string{"synchronous_standby_names", "replica1"}},
		{name: "no standby connected", s: Status{SynchronousCommit: "on", SynchronousStandbyNames: "ANY 1 (s1)"},
			want: map[string]Severity{CheckStandbys: Warn}, mention: []string{"wait"}},
		{name: "no privilege to see states", s: Status{SynchronousCommit: "on", SynchronousStandbyNames: "ANY 1 (s1)", Standbys: []Standby{{Name: "s1"}}},
			want: map[string]Severity{CheckStandbys: OK}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fs := c.s.Findings()
			for check, sev := range c.want {
				f, ok := find(fs, check)
				if !ok {
					t.Errorf("no %q finding in %+v", check, fs)
					continue
				}
				if f.Severity != sev {
					t.Errorf("%s: severity %s, want %s (%s)", check, f.Severity, sev, f.Detail)
				}
				if sev != OK {
					if f.Fix == "" {
						t.Errorf("%s: %s without a fix", check, sev)
					}
					for _, m := range c.mention {
						if !strings.Contains(f.Detail+" "+f.Fix, m) {
							t.Errorf("%s: %q not mentioned in %q / %q", check, m, f.Detail, f.Fix)
						}
					}
				}
			}
		})
	}
}
