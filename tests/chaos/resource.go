package chaos

import "sync"

// ResourceStats counts writes to the fenced resource.
type ResourceStats struct {
	Accepted, RejectedInBelief, ZombieAccepted, ZombieRejected int64
}

// resource is a fenced resource: it accepts a write only with a fence at
// least as large as every fence it accepted before for the key.
type resource struct {
	mu   sync.Mutex
	last map[string]int64
	st   ResourceStats
}

func (r *resource) write(key string, fence int64, zombie bool) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	ok := fence >= r.last[key]
	if ok {
		r.last[key] = fence
	}
	switch {
	case zombie && ok:
		r.st.ZombieAccepted++
	case zombie:
		r.st.ZombieRejected++
	case ok:
		r.st.Accepted++
	default:
		r.st.RejectedInBelief++
	}
	return ok
}
