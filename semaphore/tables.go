package semaphore

// TableName reports the lock table name (syncguard.Config.TableName,
// resolved) that s's tables are named from (Tables).
func (s *Semaphore) TableName() string { return s.table }
