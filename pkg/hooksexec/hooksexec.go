// Package hooksexec applies KubeVirt's hook sidecars
// (hooks.kubevirt.io/hookSidecars) to a rendered domain by exec of
// virt-launcher-hooks (kubevirtmode/cmd/virt-launcher-hooks, KubeVirt
// v1.6.0's own hook manager and sidecar programs, a module of its own):
// the one copy of building its request (the VMI, the domain, the
// ConfigMaps beside the VM) and reading its answer, for the launcher's
// converter stage (pkg/launchprep) and the differential (pkg/kvdiff).
// cgo-free; it imports pkg/manifest only.
package hooksexec

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	v1 "kubevirt.io/api/core/v1"

	"github.com/crashloop-harness/crashloop/pkg/manifest"
)

// HooksName is the program that runs the hooks, installed beside the
// converter stage by `make kubevirtmode`.
const HooksName = "virt-launcher-hooks"

// exitRefused is virt-launcher-hooks' exit status for a refused
// annotation or a failed sidecar (its line on stderr says why).
const exitRefused = 1

// Runner runs virt-launcher-hooks.
type Runner struct {
	// Exe is the virt-launcher-hooks binary.
	Exe string
	// WorkDir holds the sidecars' sockets and scripts (direct mode); it
	// must exist.
	WorkDir string
	// Sidecars, when not 0, is KubeVirt mode's count of sidecars that
	// already serve in /var/run/kubevirt-hooks (--hook-sidecars); the
	// annotation's sidecars are then not started here.
	Sidecars uint
	// Timeout is how long the sidecars have to serve their sockets.
	Timeout time.Duration
}

// Named tells whether the VMI names hook sidecars.
func Named(vmi *v1.VirtualMachineInstance) bool {
	_, ok := vmi.Annotations[manifest.HookSidecarsAnnotation]
	return ok
}

// request is virt-launcher-hooks' stdin.
type request struct {
	VMI        *v1.VirtualMachineInstance   `json:"vmi"`
	Domain     string                       `json:"domain"`
	ConfigMaps map[string]map[string]string `json:"configMaps"`
}

// Check reads the annotation without starting anything (the dry run): its
// sidecars' images and the ConfigMaps they name; nothing in KubeVirt mode,
// where the sidecars are the pod's containers. Errors are those of Apply.
func (r Runner) Check(ctx context.Context, vmi *v1.VirtualMachineInstance, objs []manifest.Object, input string) error {
	if r.Sidecars > 0 {
		return nil
	}
	_, err := r.run(ctx, []string{"--check"}, vmi, "<domain/>", objs, input)
	return err
}

// Apply returns domain rewritten by the VMI's hook sidecars, in their
// order: in direct mode it starts them (and stops them before it returns),
// in KubeVirt mode it waits for r.Sidecars. objs are the objects beside
// the VM (its ConfigMaps are the sidecars' scripts). A refused annotation
// or a failed sidecar is a *manifest.InvalidError naming the annotation;
// anything else (virt-launcher-hooks not installed) an internal error.
func (r Runner) Apply(ctx context.Context, vmi *v1.VirtualMachineInstance, domain string, objs []manifest.Object, input string) (string, error) {
	args := []string{"--start", "--work-dir", r.WorkDir}
	if r.Sidecars > 0 {
		args = []string{"--sidecars", strconv.FormatUint(uint64(r.Sidecars), 10)}
	}
	if r.Timeout > 0 {
		args = append(args, "--timeout", r.Timeout.String())
	}
	return r.run(ctx, args, vmi, domain, objs, input)
}

func (r Runner) run(ctx context.Context, args []string, vmi *v1.VirtualMachineInstance, domain string, objs []manifest.Object, input string) (string, error) {
	cms, err := configMaps(objs, vmi.Namespace)
	if err != nil {
		return "", &manifest.InvalidError{Input: input, Msg: err.Error()}
	}
	stdin, err := json.Marshal(request{VMI: vmi, Domain: domain, ConfigMaps: cms})
	if err != nil {
		return "", err
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, r.Exe, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = bytes.NewReader(stdin), &stdout, &stderr
	// The sidecars die with the launch, whatever ends it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	err = cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.Is(err, fs.ErrNotExist) || errors.Is(err, exec.ErrNotFound):
		return "", fmt.Errorf("%s names hook sidecars (%s): running them needs %s, which is not installed at %s: build it with `make kubevirtmode`", input, manifest.HookSidecarsAnnotation, HooksName, r.Exe)
	case errors.As(err, &exit) && exit.ExitCode() == exitRefused:
		return "", &manifest.InvalidError{Input: input, Msg: strings.TrimSpace(stderr.String())}
	case err != nil:
		return "", fmt.Errorf("%s %s: %w: %s", HooksName, input, err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// configMaps are the data of the ConfigMaps among objs in the VMI's
// namespace (the first of a name wins, the file's before the folder's).
func configMaps(objs []manifest.Object, namespace string) (map[string]map[string]string, error) {
	if namespace == "" {
		namespace = "default"
	}
	out := map[string]map[string]string{}
	for _, o := range objs {
		if o.Kind != manifest.KindConfigMap || o.Namespace != namespace {
			continue
		}
		if _, seen := out[o.Name]; seen {
			continue
		}
		var cm struct {
			Data map[string]string `json:"data"`
		}
		if err := json.Unmarshal(o.JSON, &cm); err != nil {
			return nil, fmt.Errorf("%s: ConfigMap %q: field data: %v: want string values", o.Source, o.Name, err)
		}
		out[o.Name] = cm.Data
	}
	return out, nil
}
