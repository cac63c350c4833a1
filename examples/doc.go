// Package examples holds runnable examples of syncguard with the ORMs Go
// teams use on PostgreSQL, each on an existing *sql.DB: GORM
// (gorm.io/gorm with gorm.io/driver/postgres), sqlx, bun and ent. For each,
// a job runs under WithLock and writes with the lock's fence, and a lock is
// taken inside the ORM's own transaction, so that a rollback undoes it.
// docs/orm.md shows the same code; a test keeps the two identical.
//
// It is a module of its own, required by nothing, so that no published
// module depends on an ORM; `make test` runs it against the test
// PostgreSQL (tests/pgtest).
package examples
