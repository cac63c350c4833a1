package ha

import "syscall"

// setPdeathsig makes Linux signal the child when the thread that started it
// dies, so a crashed test binary leaves no formation running.
func setPdeathsig(a *syscall.SysProcAttr, sig syscall.Signal) { a.Pdeathsig = sig }
