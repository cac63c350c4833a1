//go:build !syncguard_broken

package rules

// brokenLiveMs is 0: see live_broken.go.
const brokenLiveMs = 0
