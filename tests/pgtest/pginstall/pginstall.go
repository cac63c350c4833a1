// Package pginstall finds the PostgreSQL server programs installed on this
// machine and the OS user to run them as. The throwaway servers of package
// pgtest and the failover formations of tests/ha both start server
// programs from here; it has no dependency beyond the standard library.
package pginstall

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
)

// Credential is the OS identity the server programs (initdb, pg_ctl,
// postgres, pgbouncer, pg_autoctl) are run as: nil when this process is
// not root, so that they run as it; when it is root, which they refuse,
// the `postgres` OS user's.
func Credential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root and no `postgres` OS user to run the server programs as: %w", err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err := errors.Join(err1, err2); err != nil {
		return nil, fmt.Errorf("OS user postgres: %w", err)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// Looked is where BinDirs looks, in order, for error messages.
const Looked = "$SYNCGUARD_PG_BINDIR, PATH, pg_config --bindir, /usr/lib/postgresql/*/bin, /usr/pgsql-*/bin, /usr/local/pgsql/bin"

// BinDirs lists the directories that may hold server binaries, in the
// order to try them: $SYNCGUARD_PG_BINDIR, the directory of pg_ctl on
// PATH, `pg_config --bindir`, /usr/lib/postgresql/*/bin and
// /usr/pgsql-*/bin (newest major version first), /usr/local/pgsql/bin.
// The directories need not exist.
func BinDirs() []string {
	var dirs []string
	if d := os.Getenv("SYNCGUARD_PG_BINDIR"); d != "" {
		dirs = append(dirs, d)
	}
	if p, err := exec.LookPath("pg_ctl"); err == nil {
		if p, err := filepath.EvalSymlinks(p); err == nil {
			dirs = append(dirs, filepath.Dir(p))
		}
	}
	if p, err := exec.LookPath("pg_config"); err == nil {
		if out, err := exec.Command(p, "--bindir").Output(); err == nil {
			dirs = append(dirs, strings.TrimSpace(string(out)))
		}
	}
	for _, pattern := range []string{"/usr/lib/postgresql/*/bin", "/usr/pgsql-*/bin"} {
		m, _ := filepath.Glob(pattern)
		sort.Slice(m, func(i, j int) bool { return majorOf(m[i]) > majorOf(m[j]) })
		dirs = append(dirs, m...)
	}
	return append(dirs, "/usr/local/pgsql/bin")
}

// majorOf extracts the major version from a path like
// /usr/lib/postgresql/15/bin or /usr/pgsql-15/bin.
func majorOf(dir string) int {
	s := filepath.Base(filepath.Dir(dir))
	s = strings.TrimPrefix(s, "pgsql-")
	v, _ := strconv.Atoi(strings.SplitN(s, ".", 2)[0])
	return v
}

// IsExecutable reports whether path is a file someone may execute.
func IsExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && !fi.IsDir() && fi.Mode().Perm()&0o111 != 0
}
