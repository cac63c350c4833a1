package pq_test

import (
	"testing"

	"github.com/syncguard/syncguard-go/internal/pgtest"
	"github.com/syncguard/syncguard-go/internal/pgtest/suite"
	sgpq "github.com/syncguard/syncguard-go/pq"
)

func TestMain(m *testing.M) { pgtest.Main(m, pgtest.Options{}) }

// lib/pq behind PgBouncer 1.18 in transaction mode needs
// binary_parameters=yes: lib/pq then sends an unprepared parameterized query
// as Parse/Bind/Execute/Sync in one round trip. Without it, lib/pq sends
// Parse/Describe/Sync, waits, then Bind/Execute/Sync, and PgBouncer may run
// the second half on another server connection (26000 "unnamed prepared
// statement does not exist", or another client's statement).
var pq = suite.Driver{Name: "postgres", Dialect: sgpq.Dialect, PgBouncerParams: "&binary_parameters=yes"}

func TestConformance(t *testing.T)                 { suite.Run(t, pq) }
func TestConformanceThroughPgBouncer(t *testing.T) { suite.RunThroughPgBouncer(t, pq) }
