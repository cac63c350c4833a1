package conformance

import (
	"os"
	"strings"
)

// ciMarkers are the environment variables by which CI services mark their
// jobs, besides CI itself (which most of them set too).
var ciMarkers = []string{
	"GITHUB_ACTIONS",         // GitHub Actions
	"GITLAB_CI",              // GitLab CI/CD
	"BUILDKITE",              // Buildkite
	"JENKINS_URL",            // Jenkins
	"HUDSON_URL",             // Jenkins (older) and Hudson
	"TF_BUILD",               // Azure Pipelines
	"CIRCLECI",               // CircleCI
	"TRAVIS",                 // Travis CI
	"TEAMCITY_VERSION",       // TeamCity
	"BITBUCKET_BUILD_NUMBER", // Bitbucket Pipelines
	"APPVEYOR",               // AppVeyor
	"CODEBUILD_BUILD_ID",     // AWS CodeBuild
	"DRONE",                  // Drone
	"SEMAPHORE",              // Semaphore
	"CIRRUS_CI",              // Cirrus CI
	"BITRISE_IO",             // Bitrise
	"CF_BUILD_ID",            // Codefresh
	"GO_PIPELINE_LABEL",      // GoCD
	"HEROKU_TEST_RUN_ID",     // Heroku CI
	"WOODPECKER",             // Woodpecker
}

// InCI reports whether the environment marks this process as running in a
// CI job, and names the variable that says so (such as "CI=true" or
// "GITHUB_ACTIONS=true"; "" when it is not). Run and RunAdvisory fail instead of skipping
// when it is true and there is no database to test.
//
// The variable CI decides when it is set: "false", "0", "no" or "off"
// (in any case) says this is not a CI run, any other non-empty value that
// it is. Without CI, a non-empty marker variable of a common CI service
// (GITHUB_ACTIONS, GITLAB_CI, BUILDKITE, JENKINS_URL, TF_BUILD, CIRCLECI,
// TRAVIS, TEAMCITY_VERSION, BITBUCKET_BUILD_NUMBER, APPVEYOR,
// CODEBUILD_BUILD_ID, DRONE, SEMAPHORE, CIRRUS_CI and a few more) other
// than "false" or "0" says it is.
func InCI() (marker string, ok bool) { return inCIEnv(os.Getenv) }

func inCIEnv(getenv func(string) string) (string, bool) {
	if v := strings.TrimSpace(getenv("CI")); v != "" {
		if isFalse(v) {
			return "", false
		}
		return "CI=" + v, true
	}
	for _, name := range ciMarkers {
		if v := strings.TrimSpace(getenv(name)); v != "" && !isFalse(v) {
			return name + "=" + v, true
		}
	}
	return "", false
}

func isFalse(v string) bool {
	switch strings.ToLower(v) {
	case "false", "0", "no", "off":
		return true
	}
	return false
}
