// Package overlay makes the throw-away qcow2 overlay of a read-only disk
// image with qemu-img, as KubeVirt's launcher does for a container disk:
// at once (Create), or started now and waited for later (Start, then
// Pending.Wait), so that a launcher can run qemu-img while it goes on to
// its next stage. A started qemu-img is a child of the process, and stays
// one across exec, so the stage after the exec can wait for it by its PID.
package overlay

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"

	"github.com/crashloop-harness/crashloop/internal/confine"
)

// args is qemu-img's command line for an overlay at path over image.
func args(image, format, path string) []string {
	return []string{"create", "-q", "-f", "qcow2", "-F", format, "-b", image, path}
}

// Create makes the overlay as the file name (one path component) of the
// folder dir over image (of format raw or qcow2, said explicitly: qemu-img
// never probes it) and returns its path when it is there. The file is
// created owner-only through an os.Root of dir (internal/confine) before
// qemu-img writes it, so that it cannot be a link out of dir.
func Create(image, format, dir, name string) (string, error) {
	path, err := confine.Reserve(dir, 0o600, name)
	if err != nil {
		return "", fmt.Errorf("creating overlay of %s: %w", image, err)
	}
	out, err := exec.Command("qemu-img", args(image, format, path)...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("creating overlay of %s with qemu-img: %v: %s", image, err, strings.TrimSpace(string(out)))
	}
	return path, nil
}

// Pending is an overlay whose qemu-img was started and not waited for. It
// travels in a launch's plan across exec, hence the JSON names.
type Pending struct {
	// PID is qemu-img's, a child of this process.
	PID int `json:"pid"`
	// Image is the backing image, for the error.
	Image string `json:"image"`
	// Output is the file qemu-img's stdout and stderr go to.
	Output string `json:"output"`
	// Field is the VMI field the disk comes from, for the error.
	Field string `json:"field,omitempty"`
}

// Start starts qemu-img for the overlay dir/name over image, as Create
// makes it, its output going to dir/name.qemu-img.log, and returns
// without waiting for it: the caller (or the program it execs) must call
// Wait. Path is the overlay's.
func Start(image, format, dir, name string) (p Pending, path string, err error) {
	path, err = confine.Reserve(dir, 0o600, name)
	if err != nil {
		return Pending{}, "", fmt.Errorf("creating overlay of %s: %w", image, err)
	}
	f, output, err := confine.Create(dir, 0o600, name+".qemu-img.log")
	if err != nil {
		return Pending{}, "", fmt.Errorf("creating overlay of %s: qemu-img's output file: %w", image, err)
	}
	defer f.Close()
	cmd := exec.Command("qemu-img", args(image, format, path)...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		return Pending{}, "", fmt.Errorf("creating overlay of %s with qemu-img: %w", image, err)
	}
	// Not cmd.Wait: the wait may happen after an exec, by PID.
	pid := cmd.Process.Pid
	_ = cmd.Process.Release()
	return Pending{PID: pid, Image: image, Output: output}, path, nil
}

// Wait waits for p's qemu-img, which must be a child of this process that
// nothing else reaps, and returns what Create would have returned, after
// "field F: " when p names its field.
func (p Pending) Wait() error {
	err := p.wait()
	if err != nil && p.Field != "" {
		return fmt.Errorf("field %s: %w", p.Field, err)
	}
	return err
}

func (p Pending) wait() error {
	var ws syscall.WaitStatus
	for {
		_, err := syscall.Wait4(p.PID, &ws, 0, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("creating overlay of %s with qemu-img: waiting for process %d: %w", p.Image, p.PID, err)
		}
		break
	}
	if ws.Exited() && ws.ExitStatus() == 0 {
		return nil
	}
	out, _ := os.ReadFile(p.Output)
	what := fmt.Sprintf("exit status %d", ws.ExitStatus())
	if ws.Signaled() {
		what = "signal: " + ws.Signal().String()
	}
	return fmt.Errorf("creating overlay of %s with qemu-img: %s: %s", p.Image, what, strings.TrimSpace(string(out)))
}

// WaitAll waits for every pending overlay and returns the first failure.
func WaitAll(ps []Pending) error {
	var first error
	for _, p := range ps {
		if err := p.Wait(); err != nil && first == nil {
			first = err
		}
	}
	return first
}
