// Package itest runs the conformance suite against each adapter (lib/pq and
// pgx/v5/stdlib), directly and through PgBouncer, and the cases that need two
// database/sql drivers at once (group CrossDriver): both drivers on the same
// tables, in both roles.
//
// It is a module of its own so that no published module (the core, pq,
// pgxstd) requires the test harness (tests/pgtest, dockertest) or the
// other driver: users of one adapter keep a thin module graph.
package itest
