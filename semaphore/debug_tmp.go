package semaphore

import (
	"fmt"
	"sync/atomic"
)

var dbg [10]atomic.Int64

const (
	dRelHanded = iota
	dRelFreed
	dRelStale
	dAcqGrant
	dAcqMine
	dAcqTook
	dAcqBusy
	dAcqStale
	dAcqInit
	dRelNotFound
)

func DebugCounters() string {
	names := []string{"relHanded", "relFreed", "relStale", "acqGrant", "acqMine", "acqTook", "acqBusy", "acqStale", "acqInit", "relNotFound"}
	s := ""
	for i, n := range names {
		s += fmt.Sprintf("%s=%d ", n, dbg[i].Swap(0))
	}
	return s
}
