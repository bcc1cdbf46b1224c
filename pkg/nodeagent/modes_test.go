package nodeagent

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	k8sv1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	v1 "kubevirt.io/api/core/v1"

	"github.com/crashloop-harness/crashloop/internal/confine"
	"github.com/crashloop-harness/crashloop/pkg/launcherapi"
	"github.com/crashloop-harness/crashloop/pkg/launchrt"
)

// outputsRuntime opens the launcher's output file as the process runtime
// (spawn) does, by path with mode 0644, then refuses to start it.
type outputsRuntime struct{}

func (outputsRuntime) Name() string { return "outputs" }

func (outputsRuntime) Start(_ context.Context, spec launchrt.Spec) (launchrt.Launcher, error) {
	f, err := os.OpenFile(spec.StderrFile, os.O_WRONLY|os.O_CREATE|os.O_APPEND|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, err
	}
	f.Close()
	return nil, errors.New("not started")
}

func (outputsRuntime) Adopt(context.Context, launchrt.Ref) (launchrt.Launcher, error) {
	return nil, errors.New("not adopted")
}

// TestLaunchFolderIsOwnerOnly: the launch folder of a pod, the VMI written
// in it, the launcher's events and its log are 0700 and 0600 under a
// permissive umask.
func TestLaunchFolderIsOwnerOnly(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	dir := launcherapi.Dir(filepath.Join(t.TempDir(), "pods", "default_virt-launcher-vm"))
	c := &container{podKey: types.NamespacedName{Namespace: "default", Name: "virt-launcher-vm"}, vmiKey: types.NamespacedName{Namespace: "default", Name: "vm"}, dir: dir}
	cfg := &Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), LauncherPath: "/nonexistent/virt-launcher"}
	vmi := &v1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Name: "vm", Namespace: "default"}}
	if err := c.launch(context.Background(), cfg, outputsRuntime{}, vmi, func() {}); err == nil {
		t.Fatal("launch succeeded with a runtime that refuses")
	}
	for _, p := range []string{string(dir), dir.Manifest(), dir.Events(), dir.Log()} {
		if err := confine.OwnerOnly(p); err != nil {
			t.Error(err)
		}
	}
}

// TestLaunchFolderIsThePodUsers: when the pod names a user (KubeVirt's
// non-root launcher pod: runAsUser 107), the launch folder and the
// owner-only VMI in it are that user's, so the launcher running as it can
// read the VMI and write beside it.
func TestLaunchFolderIsThePodUsers(t *testing.T) {
	dir := launcherapi.Dir(filepath.Join(t.TempDir(), "pods", "default_virt-launcher-vm"))
	qemu := int64(107)
	pod := &k8sv1.Pod{Spec: k8sv1.PodSpec{SecurityContext: &k8sv1.PodSecurityContext{RunAsUser: &qemu, FSGroup: &qemu},
		Containers: []k8sv1.Container{{Name: computeContainer}}}}
	c := &container{podKey: types.NamespacedName{Namespace: "default", Name: "virt-launcher-vm"}, vmiKey: types.NamespacedName{Namespace: "default", Name: "vm"}, dir: dir, pod: pod}
	cfg := &Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), LauncherPath: "/nonexistent/virt-launcher"}
	vmi := &v1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Name: "vm", Namespace: "default"}}
	if err := c.launch(context.Background(), cfg, outputsRuntime{}, vmi, func() {}); err == nil {
		t.Fatal("launch succeeded with a runtime that refuses")
	}
	for _, p := range []string{string(dir), dir.Manifest()} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if st := fi.Sys().(*syscall.Stat_t); st.Uid != 107 || st.Gid != 107 {
			t.Errorf("%s: owned by %d:%d, want 107:107 (the pod's runAsUser and fsGroup)", p, st.Uid, st.Gid)
		}
	}
}
