package itest_test

import (
	"testing"

	"github.com/syncguard/syncguard-go/conformance"
	"github.com/syncguard/syncguard-go/tests/pgtest"
)

// TestWrongPasswordCaseSkipsWhenLoginSucceeds runs the Errors group with an
// OpenWrongPassword whose login succeeds, as against a server given by
// SYNCGUARD_TEST_DSN that trusts its role: Errors/WrongPasswordIsAuthFailed
// must skip (the harness cannot produce a rejected login), never fail.
func TestWrongPasswordCaseSkipsWhenLoginSucceeds(t *testing.T) {
	srv := pgtest.Require(t)
	conformance.Run(t, conformance.Harness{
		Open:              conformance.Opener(pgxDriver.Name, srv.DSN),
		Dialect:           pgxDriver.Dialect,
		OpenWrongPassword: conformance.Opener(pgxDriver.Name, srv.DSN), // logs in
		Groups:            []string{"Errors"},
	})
}
