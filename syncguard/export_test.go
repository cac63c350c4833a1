package syncguard

// HasQueue reports whether Lock and WithLock wait in l's queue (l is a
// queuer) rather than poll it.
func HasQueue(l Locker) bool {
	_, ok := l.(queuer)
	return ok
}
