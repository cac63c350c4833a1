package pgtest

import "syscall"

// setPdeathsig makes Linux kill the child when the thread that started it
// dies, so a crashed test binary leaves no PgBouncer behind.
func setPdeathsig(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }
