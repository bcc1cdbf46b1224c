package cluster_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	k8sv1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	v1 "kubevirt.io/api/core/v1"
	"kubevirt.io/client-go/kubecli"

	"github.com/crashloop-harness/crashloop/pkg/nodeagent"
)

// cloudGuestImage is the cloud guest's containerDisk image (make
// cloud-image; images.json names its folder, which the node imports).
const cloudGuestImage = "localhost/crashloop/cloud-guest:latest"

// cloudVolume is the cloud guest's containerDisk volume. It comes second
// in spec.volumes, so virt-handler mounts it as disk_1.img: a launcher
// that took disk_0.img, or the image folder, would not open it.
const cloudVolume = "root"

var _ = Describe("KubeVirt's own virt-handler with the cloud guest", Label("virt-handler"), func() {
	It("runs a cloud-guest VMI without a pod network to Running, status by virt-handler, QEMU reading the disk virt-handler bind-mounted into the pod, and deletion removes QEMU, the pod and its folder", func(ctx SpecContext) {
		s, kc := virtHandlerStack(ctx)
		name := fmt.Sprintf("vh-cloud-%d", time.Now().Unix()%100000)
		vmi := cloudGuestVMI(name)
		created := time.Now()
		vmi, err := kc.VirtualMachineInstance(namespace()).Create(ctx, vmi, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func(ctx SpecContext) { // a failed spec leaves no VMI for the next one on the stack
			_ = kc.VirtualMachineInstance(namespace()).Delete(ctx, name, metav1.DeleteOptions{})
		})
		DeferCleanup(func() { // first, while the pod still runs: a failure's logs for CI's reader
			keepPodLogs(s, filepath.Join(artifacts, "virt-handler-cloud"))
			if CurrentSpecReport().Failed() && os.MkdirAll(filepath.Join(artifacts, "virt-handler-cloud"), 0o755) == nil {
				if data, err := os.ReadFile(filepath.Join(s.stateDir, "control-plane", "logs", "virt-handler.log")); err == nil {
					_ = os.WriteFile(filepath.Join(artifacts, "virt-handler-cloud", "virt-handler.log"), data, 0o644)
				}
			}
		})

		By("the VMI reaches Running (QEMU started; the guest's boot under TCG is not waited for)")
		vmi, pod, bound := waitVHRunning(ctx, kc, vmi, 4*time.Minute, func() string {
			got, _ := kc.VirtualMachineInstance(namespace()).Get(ctx, name, metav1.GetOptions{})
			var conds []string
			if got != nil {
				for _, c := range got.Status.Conditions {
					conds = append(conds, fmt.Sprintf("%s=%s %s: %s", c.Type, c.Status, c.Reason, c.Message))
				}
			}
			return fmt.Sprintf("VMI %s, conditions %q; the stack log %s on it:\n%s\nvirt-handler's log on it:\n%s", name, conds, s.logPath, linesWith(s.logPath, name, 40),
				linesWith(filepath.Join(s.stateDir, "control-plane", "logs", "virt-handler.log"), name, 30))
		})
		running := time.Now()

		By("the status is virt-handler's, and the node agent wrote nothing to the VMI")
		managers := managersOf(vmi.ManagedFields)
		Expect(managers).To(ContainElement("virt-handler"), "managedFields of VMI %s", name)
		Expect(managers).NotTo(ContainElement("clusterlite"), "the node agent writes nothing to VMIs in this mode")
		Expect(vmi.Status.ActivePods).To(HaveKeyWithValue(pod.UID, vhNode))
		Expect(vmi.Spec.Domain.Memory.MaxGuest).NotTo(BeNil(), "virt-api's defaults give a 1Gi VMI memory-hotplug room")
		Expect(vmi.Spec.Domain.Memory.MaxGuest.String()).To(Equal("4Gi"))

		By("the pod's volumecontainerdisk container runs from the cloud-guest image")
		states := podContainerStates(pod.UID)
		Expect(states).To(HaveKeyWithValue("volume"+cloudVolume, HavePrefix("Up")), "containers %v", states)
		Expect(states).To(HaveKeyWithValue("compute", HavePrefix("Up")), "containers %v", states)
		images, err := podman("ps", "--filter", "label="+nodeagent.LabelPodUID+"="+string(pod.UID),
			"--format", `{{index .Labels "`+nodeagent.LabelContainerName+`"}} {{.Image}}`)
		Expect(err).NotTo(HaveOccurred(), "podman ps: %s", images)
		Expect(strings.Split(images, "\n")).To(ContainElement("volume"+cloudVolume+" "+cloudGuestImage), "the pod's containers and their images")

		By("QEMU's open disk is virt-handler's bind mount of the disk in the volumecontainerdisk container's root")
		domain := namespace() + "_" + name
		qemu := []int{qemuOf(ctx, s, pod, domain).PID}
		target := "kubevirt/container-disks/disk_1.img"
		opened := openedFiles(qemu[0])
		fd, ok := "", false
		for link, path := range opened {
			if strings.HasSuffix(path, target) {
				fd, ok = link, true
			}
		}
		Expect(ok).To(BeTrue(), "QEMU %d opened no …/%s; its files: %v", qemu[0], target, opened)
		mounts, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", qemu[0]))
		Expect(err).NotTo(HaveOccurred())
		Expect(string(mounts)).To(ContainSubstring("/container-disks/disk_1.img "), "disk_1.img is a mount point in QEMU's mount namespace (virt-handler's bind mount)")
		disks := procsWith("container-disk", string(vmi.UID), "disk_1")
		Expect(disks).To(HaveLen(1), "the volumecontainerdisk container's container-disk process of VMI %s", vmi.UID)
		inImage := fileID(fmt.Sprintf("/proc/%d/root/disk/disk.qcow2", disks[0]))
		Expect(fileID(fd)).To(Equal(inImage), "QEMU's disk_1.img is the volumecontainerdisk container's /disk/disk.qcow2")
		// The control: the image folder's copy is another file, so the
		// check above tells the two ways of reading the disk apart.
		Expect(fileID(filepath.Join(bins.ImageDir, "cloud-guest", "disk", "disk.qcow2"))).NotTo(Equal(inImage))
		for _, path := range opened {
			Expect(path).NotTo(ContainSubstring("/usr/share/crashloop/images"), "QEMU opened a file of the image folder")
		}

		By("deleting the VMI: virt-handler stops QEMU, the agent removes the pod, its containers and its folder")
		deleted := time.Now()
		Expect(kc.VirtualMachineInstance(namespace()).Delete(ctx, name, metav1.DeleteOptions{})).To(Succeed())
		waitPodGone(ctx, kc, pod)
		podGone := time.Since(deleted)
		Eventually(alive).WithArguments(qemu).WithTimeout(30 * time.Second).Should(BeEmpty())
		Eventually(podContainerStates).WithArguments(pod.UID).WithTimeout(time.Minute).Should(BeEmpty())
		podDir := filepath.Join(s.stateDir, "nodens", "kubelet", "pods", string(pod.UID))
		Eventually(func() error { _, err := os.Stat(podDir); return err }).WithTimeout(30 * time.Second).Should(MatchError(os.ErrNotExist))
		AddReportEntry("cluster-virt-handler-cloud-guest", fmt.Sprintf("cloud guest: VMI created → pod bound %v → VMI Running %v (created → Running %v), status by virt-handler; QEMU read …/%s, the volumecontainerdisk container's disk; pod gone %v after the VMI's deletion",
			bound.Sub(created).Round(100*time.Millisecond), running.Sub(bound).Round(100*time.Millisecond), running.Sub(created).Round(100*time.Millisecond),
			target, podGone.Round(100*time.Millisecond)))
	})
})

// cloudGuestVMI is the cloud guest as a KubeVirt user writes it, with a
// NoCloud volume first and its containerDisk second, no pod network.
func cloudGuestVMI(name string) *v1.VirtualMachineInstance {
	grace := int64(30)
	// 1Gi: from there on KubeVirt's defaults (LiveUpdate rollout, as on
	// cluster-lite) add spec.domain.memory.maxGuest for memory hotplug,
	// which our launcher takes (no hotplug room under libvirt 9.0, a note).
	mem := resource.MustParse("1Gi")
	noPodNet := false
	virtio := func(n string) v1.Disk {
		return v1.Disk{Name: n, DiskDevice: v1.DiskDevice{Disk: &v1.DiskTarget{Bus: v1.DiskBusVirtio}}}
	}
	return &v1.VirtualMachineInstance{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1.GroupVersion.String(), Kind: "VirtualMachineInstance"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace()},
		Spec: v1.VirtualMachineInstanceSpec{
			TerminationGracePeriodSeconds: &grace,
			Domain: v1.DomainSpec{
				CPU:     &v1.CPU{Cores: 1},
				Memory:  &v1.Memory{Guest: &mem},
				Devices: v1.Devices{AutoattachPodInterface: &noPodNet, Disks: []v1.Disk{virtio(cloudVolume), virtio("cloudinit")}},
			},
			Volumes: []v1.Volume{
				{Name: "cloudinit", VolumeSource: v1.VolumeSource{CloudInitNoCloud: &v1.CloudInitNoCloudSource{UserData: "#cloud-config\n"}}},
				{Name: cloudVolume, VolumeSource: v1.VolumeSource{ContainerDisk: &v1.ContainerDiskSource{Image: cloudGuestImage}}},
			},
		},
	}
}

// waitVHRunning waits until vmi is Running, and returns it as then, its
// launcher pod and when that pod was first seen bound to the virt-handler
// stack's node; describe explains a timeout.
func waitVHRunning(ctx SpecContext, kc kubecli.KubevirtClient, vmi *v1.VirtualMachineInstance, timeout time.Duration, describe func() string) (*v1.VirtualMachineInstance, *k8sv1.Pod, time.Time) {
	byVMI := metav1.ListOptions{LabelSelector: v1.CreatedByLabel + "=" + string(vmi.UID)}
	var bound time.Time
	var pod *k8sv1.Pod
	current := vmi
	Eventually(func(g Gomega) {
		if pod == nil {
			pods, err := kc.CoreV1().Pods(vmi.Namespace).List(ctx, byVMI)
			if err == nil && len(pods.Items) == 1 && pods.Items[0].Spec.NodeName == vhNode {
				bound, pod = time.Now(), &pods.Items[0]
			}
		}
		got, err := kc.VirtualMachineInstance(vmi.Namespace).Get(ctx, vmi.Name, metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		current = got
		g.Expect(got.Status.Phase).To(Equal(v1.Running))
	}).WithTimeout(timeout).WithPolling(100*time.Millisecond).Should(Succeed(), describe)
	Expect(pod).NotTo(BeNil(), "the launcher pod of VMI %s was never seen bound to %s", vmi.Name, vhNode)
	return current, pod, bound
}

// procsWith lists the host's processes named comm (not the podman or
// conmon processes whose command lines name theirs) whose command line
// contains every one of parts.
func procsWith(comm string, parts ...string) []int {
	dirs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	var pids []int
next:
	for _, f := range dirs {
		name, err := os.ReadFile(filepath.Join(filepath.Dir(f), "comm"))
		if err != nil || strings.TrimSpace(string(name)) != comm {
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		line := string(bytes.ReplaceAll(data, []byte{0}, []byte{' '}))
		for _, p := range parts {
			if !strings.Contains(line, p) {
				continue next
			}
		}
		if pid, err := strconv.Atoi(filepath.Base(filepath.Dir(f))); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// openedFiles are the files process pid has open, by their /proc fd link,
// as paths in its own mount namespace.
func openedFiles(pid int) map[string]string {
	links, err := filepath.Glob(fmt.Sprintf("/proc/%d/fd/*", pid))
	Expect(err).NotTo(HaveOccurred())
	files := map[string]string{}
	for _, l := range links {
		if p, err := os.Readlink(l); err == nil && strings.HasPrefix(p, "/") {
			files[l] = p
		}
	}
	return files
}

// fileID is a file's device and inode: one file under every name and
// bind mount.
func fileID(path string) string {
	var st syscall.Stat_t
	Expect(syscall.Stat(path, &st)).To(Succeed(), "stat %s", path)
	return fmt.Sprintf("%d:%d", st.Dev, st.Ino)
}
