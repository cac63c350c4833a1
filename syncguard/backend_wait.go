package syncguard

import "context"

// The Backend's side of waiting (wake.go): the helper's hooks and the
// LISTEN connection's controls.

// waitHub implements waitable.
func (b *Backend) waitHub() *hub { return b.shared.hub }

// NotificationStatus reports whether Lock and WithLock on b are woken by
// notifications when a contended key is released (Active), or fall back to
// polling, and why. With check set it first opens the Backend's LISTEN
// connection if none is open and waits, at most until ctx is done, for its
// probe notification to come back; syncguard doctor uses it. Without check
// it does no I/O.
func (b *Backend) NotificationStatus(ctx context.Context, check bool) NotificationStatus {
	return b.shared.hub.status(ctx, check)
}

// Close closes what the Backend opened itself: the LISTEN connection that
// wakes waiting Lock and WithLock calls, if one is open, and its goroutine.
// It does not close the *sql.DB. The Backend stays usable: a later wait
// opens a new LISTEN connection, and waits in progress poll until then.
// Without Close that connection closes itself 30 s after the last wait.
func (b *Backend) Close() error {
	b.shared.hub.close()
	return nil
}
