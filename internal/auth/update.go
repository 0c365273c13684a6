package auth

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// UpdateFile is the read-modify-write of the tokens file at path (a symbolic link is followed),
// serialised with every other UpdateFile and CreateFile on it: it holds an exclusive flock(2) on path+".lock" (created 0600 beside the file,
// left in place) while it reads the file (missing: an empty File when missingOK, else the
// ReadFile error), lets change edit it, and writes it with WriteFile. Two `bookrecon tokens`
// commands run at once therefore both take effect; without the lock the second write would drop
// the first's change — a revocation could come back. change's error is returned as it is and
// nothing is written. The lock is advisory: services only read the file, and WriteFile's rename
// gives them the old or the new content, never a part.
func UpdateFile(path string, missingOK bool, change func(*File) error) error {
	path = resolve(path)
	return locked(path, func() error {
		f, err := ReadFile(path)
		if missingOK && errors.Is(err, fs.ErrNotExist) {
			f, err = File{}, nil
		}
		if err != nil {
			return err
		}
		if err := change(&f); err != nil {
			return err
		}
		return WriteFile(path, f)
	})
}

// CreateFile writes an empty tokens file at path unless one exists, under UpdateFile's lock, so
// that it never overwrites a file another command is writing. created false: the file exists
// and is left as it is, after ReadFile validated it (its error is returned).
func CreateFile(path string) (created bool, err error) {
	path = resolve(path)
	err = locked(path, func() error {
		if _, err := os.Stat(path); err == nil {
			_, err := ReadFile(path)
			return err
		}
		created = true
		return WriteFile(path, File{})
	})
	return created && err == nil, err
}

// resolve follows a symbolic link at path, so that commands given the link and the file it names
// take the same lock and replace the same file (WriteFile follows it too).
func resolve(path string) string {
	if real, err := filepath.EvalSymlinks(path); err == nil {
		return real
	}
	return path
}

// locked runs fn holding the exclusive lock of path's tokens file (path+".lock").
func locked(path string, fn func() error) error {
	lf, err := os.OpenFile(path+".lock", os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("%w %s: lock: %w", ErrFile, path, err)
	}
	defer func() { _ = lf.Close() }() // closing the descriptor releases the lock
	if err := flock(lf); err != nil {
		return fmt.Errorf("%w %s: lock: %w", ErrFile, path, err)
	}
	return fn()
}

// flock takes an exclusive lock on f, waiting for it (retried on EINTR).
func flock(f *os.File) error {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}
