package conformance

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

func TestInCIEnv(t *testing.T) {
	cases := []struct {
		env        map[string]string
		wantMarker string
		want       bool
	}{
		{env: nil, want: false},
		{env: map[string]string{"CI": "true"}, wantMarker: "CI=true", want: true},
		{env: map[string]string{"CI": "1"}, wantMarker: "CI=1", want: true},
		{env: map[string]string{"CI": "yes"}, wantMarker: "CI=yes", want: true},
		{env: map[string]string{"CI": "woodpecker"}, wantMarker: "CI=woodpecker", want: true},
		{env: map[string]string{"CI": "false"}, want: false},
		{env: map[string]string{"CI": "0"}, want: false},
		{env: map[string]string{"CI": "FALSE"}, want: false},
		{env: map[string]string{"CI": " "}, want: false},
		// CI decides when it is set, even against a service's marker.
		{env: map[string]string{"CI": "false", "GITHUB_ACTIONS": "true"}, want: false},
		{env: map[string]string{"CI": "true", "GITHUB_ACTIONS": "true"}, wantMarker: "CI=true", want: true},
		{env: map[string]string{"GITHUB_ACTIONS": "true"}, wantMarker: "GITHUB_ACTIONS=true", want: true},
		{env: map[string]string{"GITLAB_CI": "true"}, wantMarker: "GITLAB_CI=true", want: true},
		{env: map[string]string{"BUILDKITE": "true"}, wantMarker: "BUILDKITE=true", want: true},
		{env: map[string]string{"JENKINS_URL": "http://ci:8080/"}, wantMarker: "JENKINS_URL=http://ci:8080/", want: true},
		{env: map[string]string{"TF_BUILD": "True"}, wantMarker: "TF_BUILD=True", want: true},
		{env: map[string]string{"CIRCLECI": "true"}, wantMarker: "CIRCLECI=true", want: true},
		{env: map[string]string{"TRAVIS": "true"}, wantMarker: "TRAVIS=true", want: true},
		{env: map[string]string{"TEAMCITY_VERSION": "2024.03"}, wantMarker: "TEAMCITY_VERSION=2024.03", want: true},
		{env: map[string]string{"BITBUCKET_BUILD_NUMBER": "42"}, wantMarker: "BITBUCKET_BUILD_NUMBER=42", want: true},
		{env: map[string]string{"CODEBUILD_BUILD_ID": "p:1"}, wantMarker: "CODEBUILD_BUILD_ID=p:1", want: true},
		{env: map[string]string{"GITHUB_ACTIONS": "false"}, want: false},
		{env: map[string]string{"GITHUB_ACTIONS": ""}, want: false},
		{env: map[string]string{"CONTINUOUS": "true"}, want: false},
	}
	for _, c := range cases {
		marker, ok := inCIEnv(func(k string) string { return c.env[k] })
		if ok != c.want || marker != c.wantMarker {
			t.Errorf("env %v: InCI = %q, %v; want %q, %v", c.env, marker, ok, c.wantMarker, c.want)
		}
	}
}

// TestSQLTierSkipNamesHarnessHook: a SQL-tier case without its hook (such
// as Fences/SurviveServerRestart without a Restart) skips naming the
// Harness field the user sets, not a Target field.
func TestSQLTierSkipNamesHarnessHook(t *testing.T) {
	if os.Getenv("SYNCGUARD_CONFORMANCE_SKIPHELPER") != "" {
		t.Run("Case", func(t *testing.T) {
			e := &sqlEnv{env: &env{t: t}}
			e.skipUnless(false, "Restart")
			t.Error("skipUnless(false) returned")
		})
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestSQLTierSkipNamesHarnessHook$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), "SYNCGUARD_CONFORMANCE_SKIPHELPER=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the helper run failed: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "needs Harness.Restart") || strings.Contains(string(out), "Target.Restart") {
		t.Errorf("want the skip to name Harness.Restart; output:\n%s", out)
	}
}
