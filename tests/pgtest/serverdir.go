package pgtest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"github.com/syncguard/syncguard-go/tests/pgtest/pginstall"
)

// serverDir is the fresh directory a server program runs in: created
// under the temp directory, mode 0755, owned by the OS user the program
// runs as (pginstall.Credential), which also owns the files written into it.
type serverDir struct {
	dir  string
	cred *syscall.Credential // nil: run as ourselves
}

// newServerDir creates a serverDir named by pattern (as in os.MkdirTemp).
func newServerDir(pattern string) (serverDir, error) {
	cred, err := pginstall.Credential()
	if err != nil {
		return serverDir{}, fmt.Errorf("pgtest: %w", err)
	}
	base, err := tempBase(cred != nil)
	if err != nil {
		return serverDir{}, err
	}
	dir, err := os.MkdirTemp(base, pattern)
	if err != nil {
		return serverDir{}, err
	}
	d := serverDir{dir: dir, cred: cred}
	if err := errors.Join(os.Chmod(dir, 0o755), d.chown(dir)); err != nil {
		return serverDir{}, errors.Join(err, os.RemoveAll(dir))
	}
	return d, nil
}

// procAttr runs a process as the directory's OS user.
func (d serverDir) procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: d.cred}
}

func (d serverDir) writeFile(path, content string) error {
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		return err
	}
	return d.chown(path)
}

func (d serverDir) chown(path string) error {
	if d.cred == nil {
		return nil
	}
	return os.Chown(path, int(d.cred.Uid), int(d.cred.Gid))
}

// tempBase returns the directory to create a server directory in:
// os.TempDir(), or /tmp when the server runs as another OS user that could
// not reach into os.TempDir().
func tempBase(otherUser bool) (string, error) {
	base := os.TempDir()
	if !otherUser || traversableByAll(base) {
		return base, nil
	}
	if traversableByAll("/tmp") {
		return "/tmp", nil
	}
	return "", fmt.Errorf("temp dir %s is not traversable by the postgres user", base)
}

// traversableByAll reports whether every directory on the way to dir has
// the search bit for others.
func traversableByAll(dir string) bool {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return false
	}
	for {
		fi, err := os.Stat(dir)
		if err != nil || fi.Mode().Perm()&0o001 == 0 {
			return false
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return true
		}
		dir = parent
	}
}
