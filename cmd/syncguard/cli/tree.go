package cli

import "strings"

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
	out := make([]string, 0, len(env))
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		drop := false
		for _, n := range names {
			drop = drop || k == n
		}
		if !drop {
			out = append(out, kv)
		}
	}
	return out
}
