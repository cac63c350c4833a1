package pgxstd_test

import (
	"testing"

	"github.com/syncguard/syncguard-go/internal/pgtest"
	"github.com/syncguard/syncguard-go/internal/pgtest/suite"
	"github.com/syncguard/syncguard-go/pgxstd"
)

func TestMain(m *testing.M) { pgtest.Main(m, pgtest.Options{}) }

// pgx behind PgBouncer 1.18 in transaction mode needs
// default_query_exec_mode=exec (or simple_protocol, or cache_describe):
// pgx's default, cache_statement, prepares every query as a named server
// statement, which PgBouncer cannot route. exec sends each query unnamed,
// Parse/Bind/Describe/Execute/Sync in one round trip.
var pgx = suite.Driver{Name: "pgx", Dialect: pgxstd.Dialect, PgBouncerParams: "&default_query_exec_mode=exec"}

func TestConformance(t *testing.T)                 { suite.Run(t, pgx) }
func TestConformanceThroughPgBouncer(t *testing.T) { suite.RunThroughPgBouncer(t, pgx) }
