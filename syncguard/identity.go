package syncguard

import (
	"os"
	"strconv"
)

// Holder identity: who holds a lock, stored by lockId in the holders table
// (schema.sql), which lookups join on the lock row's lock_id.

// DefaultIdentity returns "host:pid", this process's host name and process
// id, for Config.Identity or LockOptions.Identity.
func DefaultIdentity() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown-host"
	}
	return host + ":" + strconv.Itoa(os.Getpid())
}
