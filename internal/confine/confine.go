// Package confine keeps the files the launcher writes inside the folders
// they belong to (the per-VMI folder, its scratch folder, the claim folder,
// the console log folder, the containerDisk cache). Every name taken from
// a manifest that becomes part of a path is checked to be exactly one path
// component (Name), and files and folders are made and looked up through
// an os.Root of their folder, so that neither "../" nor a symbolic link
// planted in the folder leads out of it. Programs that take a path string
// (libvirt, QEMU, qemu-img, xorrisofs) get filepath.Join(dir, names...)
// only after the Root made or found the file there.
package confine

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Name returns an error unless name is exactly one path component: not
// empty, not "." or "..", without a slash or a NUL byte. The error reads
// after a field's name ("field metadata.name: ...").
func Name(name string) error {
	switch {
	case name == "":
		return errors.New("is empty, and it names a file")
	case name == "." || name == "..":
		return fmt.Errorf("%q is not a name: it names a file, which must stay inside its folder", name)
	case strings.ContainsAny(name, "/\x00"):
		return fmt.Errorf("%q is not one path component (no \"/\"): it names a file, which must stay inside its folder", name)
	}
	return nil
}

// Join checks that every name is one path component and returns
// filepath.Join(dir, names...). It touches nothing on disk.
func Join(dir string, names ...string) (string, error) {
	if dir == "" {
		return "", errors.New("no folder given")
	}
	for _, n := range names {
		if err := Name(n); err != nil {
			return "", fmt.Errorf("file name in %s: %w", dir, err)
		}
	}
	return filepath.Join(append([]string{dir}, names...)...), nil
}

// open checks names and opens dir as an os.Root; rel is names joined, for
// the Root's methods.
func open(dir string, names []string) (root *os.Root, rel, full string, err error) {
	if full, err = Join(dir, names...); err != nil {
		return nil, "", "", err
	}
	if root, err = os.OpenRoot(dir); err != nil {
		return nil, "", "", fmt.Errorf("opening folder %s: %w", dir, err)
	}
	if len(names) == 0 {
		return root, ".", full, nil
	}
	return root, filepath.Join(names...), full, nil
}

// Create creates the new file dir/names... (the folders before the last
// name must exist) with mode perm, whatever the umask, and returns it open
// for writing with its path. An existing entry of that name, a symbolic
// link included, is an error.
func Create(dir string, perm fs.FileMode, names ...string) (*os.File, string, error) {
	root, rel, full, err := open(dir, names)
	if err != nil {
		return nil, "", err
	}
	defer root.Close()
	f, err := root.OpenFile(rel, os.O_CREATE|os.O_EXCL|os.O_WRONLY, perm)
	if err != nil {
		return nil, "", fmt.Errorf("creating %s: %w", full, err)
	}
	if err := f.Chmod(perm); err != nil {
		f.Close()
		return nil, "", fmt.Errorf("creating %s: %w", full, err)
	}
	return f, full, nil
}

// OpenFile opens dir/names... with flag (os.O_CREATE, os.O_TRUNC,
// os.O_APPEND... as os.OpenFile takes them) through an os.Root of dir, so
// that neither a name nor a symbolic link planted there leads out of dir,
// and returns it with its path. With os.O_CREATE the file gets mode perm,
// whatever the umask and whatever mode it had: it is a file the launcher
// owns (a log that a program appends to by path afterwards).
func OpenFile(dir string, flag int, perm fs.FileMode, names ...string) (*os.File, string, error) {
	root, rel, full, err := open(dir, names)
	if err != nil {
		return nil, "", err
	}
	defer root.Close()
	f, err := root.OpenFile(rel, flag, perm)
	if err != nil {
		return nil, "", fmt.Errorf("opening %s: %w", full, err)
	}
	if flag&os.O_CREATE != 0 {
		if err := f.Chmod(perm); err != nil {
			f.Close()
			return nil, "", fmt.Errorf("opening %s: %w", full, err)
		}
	}
	return f, full, nil
}

// Reserve creates the empty file dir/names... with mode perm (as Create)
// for a program that takes a path and writes the file (qemu-img,
// xorrisofs), and returns the path to hand it.
func Reserve(dir string, perm fs.FileMode, names ...string) (string, error) {
	f, full, err := Create(dir, perm, names...)
	if err != nil {
		return "", err
	}
	return full, f.Close()
}

// WriteFile creates dir/names... (as Create) holding data.
func WriteFile(dir string, data []byte, perm fs.FileMode, names ...string) (string, error) {
	f, full, err := Create(dir, perm, names...)
	if err != nil {
		return "", err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return "", fmt.Errorf("writing %s: %w", full, err)
	}
	if err := f.Close(); err != nil {
		return "", fmt.Errorf("writing %s: %w", full, err)
	}
	return full, nil
}

// MkdirAll makes the folders dir/names... with mode perm (folders that
// exist are kept as they are) and returns the path. dir itself must exist.
func MkdirAll(dir string, perm fs.FileMode, names ...string) (string, error) {
	root, rel, full, err := open(dir, names)
	if err != nil {
		return "", err
	}
	defer root.Close()
	if err := root.MkdirAll(rel, perm); err != nil {
		return "", fmt.Errorf("creating folder %s: %w", full, err)
	}
	return full, nil
}

// Stat describes dir/names..., following symbolic links only while they
// stay inside dir, and returns the path. A missing file is an error that
// matches fs.ErrNotExist; one reached through a link out of dir is not.
func Stat(dir string, names ...string) (string, fs.FileInfo, error) {
	root, rel, full, err := open(dir, names)
	if err != nil {
		return "", nil, err
	}
	defer root.Close()
	fi, err := root.Stat(rel)
	if err != nil {
		return full, nil, err
	}
	return full, fi, nil
}

// Remove removes the file dir/names... (not what a symbolic link of that
// name points to).
func Remove(dir string, names ...string) error {
	root, rel, _, err := open(dir, names)
	if err != nil {
		return err
	}
	defer root.Close()
	return root.Remove(rel)
}

// OwnerOnly returns an error unless path is as the launcher makes what
// holds a VMI: a folder of mode 0700 or any other file of mode 0600.
func OwnerOnly(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	want := fs.FileMode(0o600)
	if fi.IsDir() {
		want = 0o700
	}
	if got := fi.Mode().Perm(); got != want {
		return fmt.Errorf("%s: mode %v, want %v", path, got, want)
	}
	return nil
}
