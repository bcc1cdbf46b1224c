// Package vmexpandexec expands the instancetype and preference a
// VirtualMachine names by exec of virt-launcher-expand (KubeVirt v1.6.0's
// own code, kubevirtmode/cmd/virt-launcher-expand, a module of its own):
// the one copy of finding the objects (beside the VM in its file, or in an
// --instancetypes folder) and running the expander, for the launcher's
// converter stage (pkg/launchprep) and the local controller
// (pkg/controller). cgo-free; it imports pkg/manifest only.
package vmexpandexec

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os/exec"
	"slices"
	"strings"

	"github.com/crashloop-harness/crashloop/pkg/manifest"
)

// ExpanderName is the program that expands instancetypes and preferences
// with KubeVirt's own code (kubevirtmode/cmd/virt-launcher-expand),
// installed beside the converter stage and the controller by
// `make kubevirtmode`.
const ExpanderName = "virt-launcher-expand"

// exitRefused is virt-launcher-expand's exit status when KubeVirt refuses
// the VM (its line on stderr says why).
const exitRefused = 1

// Expander turns a launcher's manifest file into the one VM or VMI document
// that runs, with the instancetypes and preferences the VM names applied.
type Expander struct {
	// Exe is the virt-launcher-expand binary.
	Exe string
	// Dir is the --instancetypes folder; empty for none.
	Dir string
}

// UsageError is a bad --instancetypes folder.
type UsageError struct{ Err error }

// Error implements error.
func (e *UsageError) Error() string { return e.Err.Error() }

// Unwrap returns the underlying error.
func (e *UsageError) Unwrap() error { return e.Err }

// Machine returns the manifest's VM or VMI document. For a VM that names
// an instancetype or a preference, the objects come from the same file
// (beside the VM, as `kubectl apply -f` takes them) or from the folder,
// the file's first; the result is the VM virt-launcher-expand returns,
// with its template as KubeVirt's controller makes the VMI. A missing
// object, a VM KubeVirt refuses and any other document in the file are
// *manifest.InvalidError; a bad folder a *UsageError; anything else (the
// expander not installed) an internal error.
func (e Expander) Machine(ctx context.Context, data []byte, input string) ([]byte, error) {
	l, err := manifest.Split(data, input)
	if err != nil {
		return nil, err
	}
	return e.Expand(ctx, l.Machine, l.Objects, input)
}

// Expand returns machine (one VM or VMI document as JSON) with the
// instancetype and preference a VM names applied, the objects taken from
// objs (those of the machine's file) or else from the folder; machine as
// it is when it names none. input names the file in messages. Errors are
// those of Machine.
func (e Expander) Expand(ctx context.Context, machine []byte, objs []manifest.Object, input string) ([]byte, error) {
	refs := manifest.Refs(machine)
	if len(refs) == 0 {
		return machine, nil
	}
	if e.Dir != "" {
		more, err := manifest.ReadObjectDir(e.Dir)
		if err != nil {
			return nil, &UsageError{fmt.Errorf("--instancetypes %s: %w", e.Dir, err)}
		}
		objs = append(slices.Clip(objs), more...)
	}
	stdin := bytes.NewBuffer(append(bytes.Clone(machine), '\n'))
	for _, r := range refs {
		if r.Name == "" {
			return nil, &manifest.InvalidError{Input: input, Field: r.Field + ".name", Msg: "must be set: inferring the object from a volume (inferFromVolume) needs the volume's labels, which only a cluster's PVCs and DataVolumes carry"}
		}
		o, ok := r.Find(objs)
		if !ok {
			return nil, &manifest.InvalidError{Input: input, Field: r.Field, Msg: e.missing(r, input)}
		}
		fmt.Fprintf(stdin, "---\n%s\n", o.JSON)
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, e.Exe)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.Is(err, fs.ErrNotExist) || errors.Is(err, exec.ErrNotFound):
		return nil, fmt.Errorf("%s names %s %q: expanding it needs %s, which is not installed at %s: build it with `make kubevirtmode`", input, refs[0].Kind, refs[0].Name, ExpanderName, e.Exe)
	case errors.As(err, &exit) && exit.ExitCode() == exitRefused:
		return nil, &manifest.InvalidError{Input: input, Msg: "KubeVirt refuses the VirtualMachine: " + strings.TrimSpace(stderr.String())}
	case err != nil:
		return nil, fmt.Errorf("%s %s: %w: %s", ExpanderName, input, err, strings.TrimSpace(stderr.String()))
	}
	return stdout.Bytes(), nil
}

// missing says where an object was looked for.
func (e Expander) missing(r manifest.Ref, input string) string {
	where := "not in " + input
	if e.Dir != "" {
		where += " nor in --instancetypes " + e.Dir
	} else {
		where += " (put it there beside the VM, or name a folder of such objects with --instancetypes)"
	}
	name := fmt.Sprintf("%q", r.Name)
	if r.Namespace != "" {
		name = fmt.Sprintf("%q in namespace %q", r.Name, r.Namespace)
	}
	return fmt.Sprintf("%s %s not found: %s", r.Kind, name, where)
}
