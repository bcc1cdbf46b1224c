package qemu

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"libvirt.org/go/libvirt"
)

// StartEventLoop registers libvirt's default event loop implementation and
// runs it until ctx ends. libvirt keeps the implementation process-wide, so
// a process calls this once, before its first connection.
func StartEventLoop(ctx context.Context) error {
	if err := libvirt.EventRegisterDefaultImpl(); err != nil {
		return fmt.Errorf("registering libvirt's event loop: %w", err)
	}
	go func() {
		for ctx.Err() == nil {
			if err := libvirt.EventRunDefaultImpl(); err != nil {
				return
			}
		}
	}()
	return nil
}

// EmbedURI is the URI of libvirt's embedded QEMU driver rooted at root: the
// driver runs inside the calling process and keeps all state under root.
func EmbedURI(root string) string { return "qemu:///embed?root=" + root }

// embedQEMUConf is the per-VMI qemu.conf of the embedded driver: QEMU runs
// as the launcher's own user and group (root when the launcher is root;
// KubeVirt's qemu, 107, when the image runs as it), and no file is
// relabelled: QEMU must read its own key files under the root, which the
// launcher made, and images shared by many launchers must not be chowned
// back and forth (libvirt's remember_owner would otherwise refuse a file
// "already in use"). An unprivileged launcher could not switch to another
// user anyway. libvirt reads "+N" as the numeric ID N, so the IDs need no
// name in the image's /etc/passwd.
//
// swtpm (a vTPM) runs as QEMU does. As root the file says so (libvirt's
// default user, tss, could not read state that root made, such as
// swtpm_setup's local CA); unprivileged it must say nothing: libvirt then
// starts swtpm_setup and swtpm as the caller, whereas naming a user, even
// the caller's own, makes it call setgroups(), which only a process with
// CAP_SETGID may ("Could not run '/usr/bin/swtpm_setup'. exitstatus: 125").
func embedQEMUConf(uid, gid int) string {
	ids := "user = \"root\"\ngroup = \"root\"\nswtpm_user = \"root\"\nswtpm_group = \"root\"\n"
	if uid != 0 || gid != 0 {
		ids = fmt.Sprintf("user = \"+%d\"\ngroup = \"+%d\"\n", uid, gid)
	}
	return `# written by virt-launcher for its embedded libvirt
` + ids + `dynamic_ownership = 0
remember_owner = 0
stdio_handler = "file"
# As KubeVirt's launcher: no per-domain mount namespace (it needs
# CAP_SYS_ADMIN) and no per-domain cgroups (read-only in a container); the
# pod or the controller's cgroup confines QEMU. Together they save ~25 ms a start.
namespaces = [ ]
cgroup_controllers = [ ]
`
}

// capsDir is where the QEMU driver keeps its capability cache under a root.
func capsDir(root string) string { return filepath.Join(root, "cache", "qemu", "capabilities") }

// PrepareEmbedRoot lays out a fresh embedded-driver root and seeds its QEMU
// capability cache from cacheDir (when non-empty), so that the driver does
// not probe QEMU again (several seconds) on every launch.
func PrepareEmbedRoot(root, cacheDir string) error {
	if err := os.MkdirAll(filepath.Join(root, "etc"), 0o700); err != nil {
		return fmt.Errorf("creating libvirt root: %w", err)
	}
	if err := os.WriteFile(filepath.Join(root, "etc", "qemu.conf"), []byte(embedQEMUConf(os.Geteuid(), os.Getegid())), 0o600); err != nil {
		return fmt.Errorf("writing qemu.conf: %w", err)
	}
	if cacheDir == "" {
		return nil
	}
	entries, err := os.ReadDir(cacheDir)
	if err != nil {
		if os.IsNotExist(err) {
			return nil
		}
		return fmt.Errorf("reading QEMU capability cache: %w", err)
	}
	dst := capsDir(root)
	if err := os.MkdirAll(dst, 0o700); err != nil {
		return fmt.Errorf("creating capability cache folder: %w", err)
	}
	for _, e := range entries {
		if !e.Type().IsRegular() || filepath.Ext(e.Name()) != ".xml" {
			continue
		}
		data, err := os.ReadFile(filepath.Join(cacheDir, e.Name()))
		if err != nil {
			return fmt.Errorf("reading cached capabilities: %w", err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), data, 0o600); err != nil {
			return fmt.Errorf("seeding capability cache: %w", err)
		}
	}
	return nil
}

// SaveCapsCache copies the capability files that the driver wrote under
// root into cacheDir when they are new or changed (a QEMU upgrade makes the
// driver re-probe and write a new file). Each file is replaced atomically,
// so concurrent launchers never read half a file.
func SaveCapsCache(root, cacheDir string) error {
	if cacheDir == "" {
		return nil
	}
	src := capsDir(root)
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if os.IsNotExist(err) {
				return nil
			}
			return err
		}
		if d.IsDir() || filepath.Ext(path) != ".xml" {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("reading new capabilities: %w", err)
		}
		dst := filepath.Join(cacheDir, d.Name())
		if old, err := os.ReadFile(dst); err == nil && bytes.Equal(old, data) {
			return nil
		}
		if err := os.MkdirAll(cacheDir, 0o755); err != nil {
			return fmt.Errorf("creating capability cache: %w", err)
		}
		tmp, err := os.CreateTemp(cacheDir, ".caps-*")
		if err != nil {
			return fmt.Errorf("saving capabilities: %w", err)
		}
		if _, err := tmp.Write(data); err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
			return fmt.Errorf("saving capabilities: %w", err)
		}
		if err := tmp.Close(); err != nil {
			os.Remove(tmp.Name())
			return fmt.Errorf("saving capabilities: %w", err)
		}
		if err := os.Rename(tmp.Name(), dst); err != nil {
			os.Remove(tmp.Name())
			return fmt.Errorf("saving capabilities: %w", err)
		}
		return nil
	})
}

// CapsCached tells whether cacheDir holds QEMU capabilities to seed a new
// embedded root with; without them libvirt probes QEMU first (it runs it
// twice), which is what makes a first launch slower.
func CapsCached(cacheDir string) bool {
	if cacheDir == "" {
		return false
	}
	entries, err := os.ReadDir(cacheDir)
	if err != nil {
		return false
	}
	for _, e := range entries {
		if e.Type().IsRegular() && filepath.Ext(e.Name()) == ".xml" {
			return true
		}
	}
	return false
}
