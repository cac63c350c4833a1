package cli

import (
	"slices"
	"strings"
)

// supervisorSpec is the first message on the order pipe.
type supervisorSpec struct {
	Path       string   `json:"path"`
	Argv       []string `json:"argv"`
	Env        []string `json:"env"`
	Foreground bool     `json:"foreground"`
	TTY        bool     `json:"tty"`      // watch the tree for processes stopped on the terminal
	Deadline   int64    `json:"deadline"` // encodeDeadline of the lock's last confirmed expiry
}

// treeEvent is an event from the supervisor.
type treeEvent struct {
	kind   string // "exit", "stop", "deadman", "done", "gone"
	status int    // exit: COMMAND's status; gone: the supervisor's
	pid    int    // stop: the stopped process
	sig    int    // stop: the signal that stopped it, 0 when only /proc saw it
	left   []int  // exit: descendants still running
	err    string // gone: why
}

// procInfo is a process's line of /proc/PID/stat (Linux).
type procInfo struct {
	pid, ppid, pgrp, tty, tpgid int
	state                       byte
}

// withoutEnv drops the variables named in names from env.
func withoutEnv(env []string, names ...string) []string {
	return slices.DeleteFunc(slices.Clone(env), func(kv string) bool {
		k, _, _ := strings.Cut(kv, "=")
		return slices.Contains(names, k)
	})
}
