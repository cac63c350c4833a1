// Package itest runs the conformance cases that need two database/sql
// drivers at once (group CrossDriver): lib/pq and pgx/v5/stdlib on the same
// tables, in both roles.
//
// It is a module of its own so that neither adapter module (pq, pgxstd) has
// to depend on the other driver: users of one adapter keep a thin module
// graph.
package itest
