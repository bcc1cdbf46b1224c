package clusterlite

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	k8sv1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/crashloop-harness/crashloop/pkg/kvmprobe"
	"github.com/crashloop-harness/crashloop/pkg/podmanrm"
)

// KubeVirt's own virt-handler as its DaemonSet runs it
// (pkg/virt-operator/resource/generate/components/daemonsets.go in
// kubevirt.io/kubevirt v1.6.0), for `clusterlite up --node-side
// virt-handler`.

// Common names virt-operator gives virt-handler's certificates
// (components/secrets.go); virt-api checks the server's, virt-handler
// checks its peers' against the kubevirt-ca ConfigMap.
const (
	handlerServerCN = "kubevirt.io:system:node:virt-handler"
	handlerClientCN = "kubevirt.io:system:client:virt-handler"
	// From v1.7.0 on, virt-handler also has a client certificate for
	// migrations and one towards the guests' vsock agents, read from
	// folders of their own (secrets kubevirt-virt-handler-migration-client-certs
	// and kubevirt-virt-handler-vsock-client-certs).
	handlerMigrationCN = "kubevirt.io:system:client:migration"
	handlerVsockCN     = "kubevirt.io:system:client:vsock"
)

// handlerCertMounts are the certificate files of WriteVirtHandlerPKI that
// v1.7.0's virt-handler reads at its default paths, by file name. The
// folders are its DaemonSet's mounts; v1.6.0 has no such flags and never
// opens them, so they are mounted for every release.
var handlerCertMounts = map[string]string{
	"migration.crt": "/etc/virt-handler/migrationservercertificates/tls.crt",
	"migration.key": "/etc/virt-handler/migrationservercertificates/tls.key",
	"vsock.crt":     "/etc/virt-handler/vsockclientcertificates/tls.crt",
	"vsock.key":     "/etc/virt-handler/vsockclientcertificates/tls.key",
}

// WriteVirtHandlerPKI issues virt-handler's serving certificate (for the
// console, VNC and lifecycle server virt-api dials at podIP) and its
// client certificate (towards the launchers' migration proxies and
// virt-api), signed by the cluster's CA, into dir: tls.crt/.key and
// client.crt/.key, and v1.7.0's migration and vsock client certificates,
// migration.crt/.key and vsock.crt/.key; returned by name.
func (cp *ControlPlane) WriteVirtHandlerPKI(dir string, podIP net.IP) (map[string]string, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating %s: %w", dir, err)
	}
	files := map[string][]byte{}
	var err error
	if files["tls.crt"], files["tls.key"], err = cp.IssueNamedServingCert(handlerServerCN,
		[]string{"virt-handler.kubevirt.svc"}, []net.IP{podIP}); err != nil {
		return nil, fmt.Errorf("issuing virt-handler's serving certificate: %w", err)
	}
	if files["client.crt"], files["client.key"], err = cp.IssueClientCert(handlerClientCN, nil); err != nil {
		return nil, fmt.Errorf("issuing virt-handler's client certificate: %w", err)
	}
	if files["migration.crt"], files["migration.key"], err = cp.IssueClientCert(handlerMigrationCN, nil); err != nil {
		return nil, fmt.Errorf("issuing virt-handler's migration client certificate: %w", err)
	}
	if files["vsock.crt"], files["vsock.key"], err = cp.IssueClientCert(handlerVsockCN, nil); err != nil {
		return nil, fmt.Errorf("issuing virt-handler's vsock client certificate: %w", err)
	}
	return writeFiles(dir, files)
}

// NodeLabellerFiles are the three files virt-handler's node labeller
// reads from /var/lib/kubevirt-node-labeller (it panics without
// capabilities.xml).
var NodeLabellerFiles = []string{"capabilities.xml", "virsh_domcapabilities.xml", "supported_features.xml"}

// WriteNodeLabellerFiles writes NodeLabellerFiles into dir with the same
// three libvirt calls as KubeVirt's node-labeller.sh
// (cmd/virt-launcher/node-labeller/node-labeller.sh), made by virsh
// against an embedded QEMU driver whose root is root (no daemon; the
// launcher's libvirt 9.0). The virt type is kvmprobe's (the launcher's
// rule), not "/dev/kvm exists" as the script has it: these machines have
// a /dev/kvm that ordinary guests cannot use. The two calls run one
// after the other: two embed connections to one root fail.
func WriteNodeLabellerFiles(ctx context.Context, dir, root string, log *slog.Logger) error {
	begin := time.Now()
	for _, d := range []string{dir, filepath.Join(root, "etc")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("node labeller: %w", err)
		}
	}
	// QEMU as root, as the launcher runs it (ENVIRONMENT.md: /dev/kvm
	// is root-only here).
	if err := os.WriteFile(filepath.Join(root, "etc", "qemu.conf"), []byte("user = \"root\"\ngroup = \"root\"\n"), 0o644); err != nil {
		return fmt.Errorf("node labeller: %w", err)
	}
	kvm, why, err := kvmprobe.Probe()
	if err != nil {
		log.Debug("could not read the host's virtualization support", "err", err)
	}
	virttype := "qemu"
	if kvm {
		virttype = "kvm"
	}
	uri := "qemu:///embed?root=" + root
	machine := []string{"--machine", "q35", "--arch", "x86_64", "--virttype", virttype}
	dom := filepath.Join(dir, "virsh_domcapabilities.xml")
	steps := []struct {
		out  string
		args []string
	}{
		{dom, append([]string{"domcapabilities"}, machine...)},
		{filepath.Join(dir, "supported_features.xml"), append([]string{"hypervisor-cpu-baseline", "--features", dom}, machine...)},
		{filepath.Join(dir, "capabilities.xml"), []string{"capabilities"}},
	}
	for _, s := range steps {
		out, err := exec.CommandContext(ctx, "virsh", append([]string{"-c", uri}, s.args...)...).Output()
		if err != nil {
			msg := ""
			if ee, ok := err.(*exec.ExitError); ok {
				msg = strings.TrimSpace(string(ee.Stderr))
			}
			return fmt.Errorf("node labeller: virsh %s: %w: %s (virsh comes with libvirt-clients, make deps)", s.args[0], err, msg)
		}
		if err := os.WriteFile(s.out, out, 0o644); err != nil {
			return fmt.Errorf("node labeller: %w", err)
		}
	}
	log.Info("node-labeller files written", "dir", dir, "virttype", virttype, "why", why, "after", time.Since(begin).Round(10*time.Millisecond))
	return nil
}

// HandlerPod is virt-handler as its DaemonSet's pod runs it.
type HandlerPod struct {
	// Node is the node namespace; NodeName the Node object.
	Node     *Node
	NodeName string
	// BinDir holds virt-handler and virt-chroot; Image is the image the
	// container runs them in (it needs a user named qemu).
	BinDir, Image string
	// PodIP is its address on the stack's namespace's lo.
	PodIP net.IP
	// Kubeconfig is the kubevirt-handler identity's; Certs the files of
	// WriteVirtHandlerPKI; LabellerDir the node-labeller files.
	Kubeconfig  string
	Certs       map[string]string
	LabellerDir string
	// Port is its metrics and /healthz port (the DaemonSet's 8443 is
	// virt-controller's in the shared namespace).
	Port string
	// ExtraFlags are appended to the DaemonSet's command line, after its
	// own flags, so that they win (pflag keeps the last value).
	ExtraFlags []string
}

// HandlerContainer is the name of virt-handler's container, in kubelet's
// form.
func HandlerContainer(node string) string {
	return "k8s_virt-handler_virt-handler-" + node + "_kubevirt_0"
}

// Argv is the command line that runs virt-handler's container in the
// foreground inside the node namespace (podman run --rm, so that a
// restart starts afresh): as root (the image's own user is the
// launcher's, 107; virt-handler's DaemonSet runs as root), privileged,
// the node's PID namespace, the
// stack's network namespace, the DaemonSet's volumes at its paths, and
// its command line, with --kubelet-pods-dir at the node's own pods folder,
// which is mounted at that same path: virt-chroot mounts containerDisks
// at the path virt-handler computes, in PID 1's mount namespace.
func (h HandlerPod) Argv(label string) []string {
	d := h.Node.Dir
	mkdirs := []string{"runtimes", "share", "private", "pod-data"}
	for _, m := range mkdirs {
		_ = os.MkdirAll(filepath.Join(d, m), 0o755)
	}
	pods := h.Node.PodsDir()
	certs := filepath.Dir(h.Certs["tls.crt"])
	args := []string{"podman", "run", "--rm", "--pull", "never", "--name", HandlerContainer(h.NodeName), "--runtime", "runc",
		"--user", "0:0", "--privileged", "--pid", "host", "--network", "ns:" + h.Node.NetNS(),
		"--label", label, "--ulimit", "nofile=20000:20000", "--ulimit", "nproc=32768:32768",
		"-v", filepath.Join(h.BinDir, "virt-handler") + ":/usr/bin/virt-handler:ro",
		"-v", filepath.Join(h.BinDir, "virt-chroot") + ":/usr/bin/virt-chroot:ro",
		"-v", filepath.Join(d, "runtimes") + ":/var/run/kubevirt-libvirt-runtimes",
		"-v", filepath.Join(d, "share") + ":/var/run/kubevirt:rshared",
		"-v", filepath.Join(d, "private") + ":/var/run/kubevirt-private",
		"-v", pods + ":/pods",
		"-v", h.Node.KubeletDir() + ":/var/lib/kubelet:rshared",
		"-v", pods + ":" + pods + ":rshared",
		"-v", h.LabellerDir + ":/var/lib/kubevirt-node-labeller",
		"-v", certs + ":/etc/virt-handler/certs:ro",
		"-v", h.Kubeconfig + ":/etc/virt-handler/kubeconfig:ro",
	}
	for _, name := range []string{"migration.crt", "migration.key", "vsock.crt", "vsock.key"} {
		if f, ok := h.Certs[name]; ok {
			args = append(args, "-v", f+":"+handlerCertMounts[name]+":ro")
		}
	}
	args = append(args, "--entrypoint", "/usr/bin/virt-handler", h.Image,
		"--kubeconfig", "/etc/virt-handler/kubeconfig", "--port", h.Port, "--hostname-override", h.NodeName,
		"--pod-ip-address", h.PodIP.String(), "--max-metric-requests", "3", "--console-server-port", "8186",
		"--graceful-shutdown-seconds", "315", "-v", "2", "--kubelet-pods-dir", pods,
		"--tls-cert-file", "/etc/virt-handler/certs/tls.crt", "--tls-key-file", "/etc/virt-handler/certs/tls.key",
		"--client-cert-file", "/etc/virt-handler/certs/client.crt", "--client-key-file", "/etc/virt-handler/certs/client.key",
	)
	args = append(args, h.ExtraFlags...)
	return h.Node.Command(args...)
}

// RegisterHandlerPod creates the Pod object virt-api finds virt-handler
// by (label kubevirt.io=virt-handler, spec.nodeName, status.podIP:8186,
// kubevirt.io/client-go's kubecli/handler.go), as its DaemonSet's pod
// would be; it runs nothing (the node agent watches launcher pods only).
func RegisterHandlerPod(ctx context.Context, c kubernetes.Interface, node, image string, ip net.IP) error {
	pods := c.CoreV1().Pods("kubevirt")
	pod := &k8sv1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "virt-handler-" + node, Namespace: "kubevirt", Labels: map[string]string{"kubevirt.io": "virt-handler"}},
		Spec:       k8sv1.PodSpec{NodeName: node, HostPID: true, Containers: []k8sv1.Container{{Name: "virt-handler", Image: image}}},
	}
	created, err := pods.Create(ctx, pod, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		created, err = pods.Get(ctx, pod.Name, metav1.GetOptions{})
	}
	if err != nil {
		return fmt.Errorf("creating virt-handler's Pod object: %w", err)
	}
	now := metav1.Now()
	created.Status = k8sv1.PodStatus{Phase: k8sv1.PodRunning, PodIP: ip.String(), PodIPs: []k8sv1.PodIP{{IP: ip.String()}},
		HostIP: "127.0.0.1", StartTime: &now,
		Conditions: []k8sv1.PodCondition{{Type: k8sv1.PodReady, Status: k8sv1.ConditionTrue, LastTransitionTime: now}}}
	if _, err := pods.UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("reporting virt-handler's Pod status: %w", err)
	}
	return nil
}

// RemoveNodeLeftovers removes the containers labelled label that a
// killed stack left. Their PIDs belong to a node namespace that is gone
// and may name unrelated processes on the host, so podman runs in a
// fresh PID namespace of its own, where those numbers name nothing
// (VIRT-HANDLER.md, plan step 4).
func RemoveNodeLeftovers(ctx context.Context, label string, log *slog.Logger) error {
	out, err := exec.CommandContext(ctx, "podman", "ps", "--all", "--filter", "label="+label, "--format", "{{.Names}}").CombinedOutput()
	if err != nil {
		return fmt.Errorf("listing leftover node containers (%s): %w: %s", label, err, out)
	}
	names := strings.Fields(string(out))
	if len(names) == 0 {
		return nil
	}
	log.Warn("removing containers a killed node namespace left", "containers", names)
	podman := func(ctx context.Context, args ...string) (string, error) {
		argv := append([]string{"--pid", "--fork", "--kill-child", "--mount-proc", "podman"}, args...)
		out, err := exec.CommandContext(ctx, "unshare", argv...).CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}
	if err := podmanrm.Remove(ctx, podman, names...); err != nil {
		return fmt.Errorf("removing leftover node containers: %w", err)
	}
	return nil
}
