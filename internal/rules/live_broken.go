//go:build syncguard_broken

package rules

// brokenLiveMs, in a build with the tag syncguard_broken only, makes
// LiveSQL treat a lock as expired 500 ms before its expiry (instead of
// live until ToleranceMs after it): a deliberately broken library whose
// fault runs the linearizability checker must reject (tests/chaos,
// TestBrokenBuildRejected). Never in a real build.
const brokenLiveMs = ToleranceMs + 500
