package cli

import "syscall"

// setPdeathsig makes Linux kill the command if syncguard itself dies
// without stopping it (SIGKILL, OOM killer): the lease is no longer
// extended then, and the lock will expire under the running command.
func setPdeathsig(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }
