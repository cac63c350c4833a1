package rwlock

// Tables returns the names of the read-write lock's tables for the lock
// table table (syncguard.Config.TableName): holders (a row per live
// lease), keys (a writer fence counter per key) and waiters (the queue).
// They are a namespace of their own: a key locked here shares no row and
// no fence counter with the mutex of the same name.
func Tables(table string) (holders, keys, waiters string) {
	n := names(table)
	return n["holders"], n["keys"], n["waiters"]
}

// TableName reports the lock table name (syncguard.Config.TableName,
// resolved) that rw's tables are named from (Tables).
func (rw *RWLock) TableName() string { return rw.table }
