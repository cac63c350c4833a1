// Package clitest drives the built syncguard command (cmd/syncguard) as a
// user would, against a throwaway PostgreSQL (tests/pgtest) or
// SYNCGUARD_TEST_DSN. It is its own module so that the published
// cmd/syncguard module requires no test machinery.
package clitest
