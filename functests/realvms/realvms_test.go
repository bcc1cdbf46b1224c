package realvms_test

import (
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	k8sv1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	v1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/crashloop-harness/crashloop/functests/testguest"
	"github.com/crashloop-harness/crashloop/pkg/launcherapi"
	"github.com/crashloop-harness/crashloop/pkg/qemu"
)

// noCloudScript prints its marker, writes the claim through the disk's
// serial and answers on port 7777 from a transient systemd unit.
const noCloudScript = `#!/bin/sh
echo "REALVMS-NOCLOUD-SCRIPT-RAN on $(hostname)" >/dev/ttyS0
printf 'REALVMS-CLAIM-WRITTEN\n' | dd of=/dev/disk/by-id/virtio-rvclaim conv=fsync 2>/dev/ttyS0
sync
cat >/run/rv-answer.py <<'PY'
import socket
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("", 7777))
s.listen(4)
while True:
    c, _ = s.accept()
    c.sendall(b"REALVMS-GUEST-ANSWER\n")
    c.close()
PY
systemd-run --unit=rv-answer python3 /run/rv-answer.py
echo "REALVMS-NOCLOUD-LISTENING" >/dev/ttyS0
`

// configDriveScript prints its own marker.
const configDriveScript = "#!/bin/sh\necho \"REALVMS-CONFIGDRIVE-SCRIPT-RAN\" >/dev/ttyS0\n"

// virtioDisk is a disk on virtio, as KubeVirt users write it for guests
// whose kernel has no AHCI (the cloud guest's).
func virtioDisk(name string) v1.Disk {
	return v1.Disk{Name: name, DiskDevice: v1.DiskDevice{Disk: &v1.DiskTarget{Bus: v1.DiskBusVirtio}}}
}

// cloudGuest is a VMI spec of the cloud guest from its containerDisk with
// one cloud-init volume, in namespace realvms.
func cloudGuest(name string, cloudInit v1.VolumeSource) *v1.VirtualMachineInstance {
	grace := int64(90)
	mem := resource.MustParse("1Gi")
	return &v1.VirtualMachineInstance{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1.GroupVersion.String(), Kind: "VirtualMachineInstance"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "realvms"},
		Spec: v1.VirtualMachineInstanceSpec{
			TerminationGracePeriodSeconds: &grace,
			Domain: v1.DomainSpec{
				CPU:     &v1.CPU{Cores: 1},
				Memory:  &v1.Memory{Guest: &mem},
				Devices: v1.Devices{Disks: []v1.Disk{virtioDisk("root"), virtioDisk("cloudinit")}},
			},
			Volumes: []v1.Volume{
				{Name: "root", VolumeSource: v1.VolumeSource{ContainerDisk: &v1.ContainerDiskSource{Image: cloudGuestImage}}},
				{Name: "cloudinit", VolumeSource: cloudInit},
			},
		},
	}
}

// noCloudVM is a VirtualMachine as a KubeVirt user writes it: the cloud
// guest with a NoCloud script, a claim (disk serial rvclaim) and a
// masquerade port, under SeaBIOS.
func noCloudVM(name string) string {
	vmi := cloudGuest(name, v1.VolumeSource{CloudInitNoCloud: &v1.CloudInitNoCloudSource{UserData: noCloudScript}})
	spec := &vmi.Spec
	data := virtioDisk("data")
	data.Serial = "rvclaim"
	spec.Domain.Devices.Disks = append(spec.Domain.Devices.Disks, data)
	spec.Volumes = append(spec.Volumes, v1.Volume{Name: "data", VolumeSource: v1.VolumeSource{
		PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{PersistentVolumeClaimVolumeSource: k8sv1.PersistentVolumeClaimVolumeSource{ClaimName: "rv-claim"}}}})
	spec.Domain.Devices.Interfaces = []v1.Interface{{Name: "default",
		InterfaceBindingMethod: v1.InterfaceBindingMethod{Masquerade: &v1.InterfaceMasquerade{}},
		Ports:                  []v1.Port{{Name: "answer", Port: 7777}}}}
	spec.Networks = []v1.Network{{Name: "default", NetworkSource: v1.NetworkSource{Pod: &v1.PodNetwork{}}}}
	always := v1.RunStrategyAlways
	vm := &v1.VirtualMachine{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1.GroupVersion.String(), Kind: "VirtualMachine"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "realvms"},
		Spec: v1.VirtualMachineSpec{RunStrategy: &always, Template: &v1.VirtualMachineInstanceTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"kubevirt.io/vm": name}}, Spec: *spec}},
	}
	return render(vm)
}

// efiVMI is the cloud guest under OVMF (no Secure Boot) with a
// ConfigDrive script.
func efiVMI(name string, cloudInit v1.VolumeSource) string {
	vmi := cloudGuest(name, cloudInit)
	off := false
	vmi.Spec.Domain.Firmware = &v1.Firmware{Bootloader: &v1.Bootloader{EFI: &v1.EFI{SecureBoot: &off}}}
	return render(vmi)
}

var configDrive = v1.VolumeSource{CloudInitConfigDrive: &v1.CloudInitConfigDriveSource{UserData: configDriveScript}}

// render is an object's YAML manifest.
func render(obj any) string {
	b, err := yaml.Marshal(obj)
	Expect(err).NotTo(HaveOccurred())
	return string(b)
}

// testGuestDump is the test guest VMI as `kubectl get vmi -o yaml` prints
// it from a cluster: server-set metadata, KubeVirt's labels and
// annotations, and a status. The guest powers off 3 s after it is ready.
func testGuestDump(name string) string {
	vmi := &v1.VirtualMachineInstance{
		TypeMeta: metav1.TypeMeta{APIVersion: v1.GroupVersion.String(), Kind: "VirtualMachineInstance"},
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: "realvms", UID: uuid.NewUUID(), ResourceVersion: "123456", Generation: 7,
			CreationTimestamp: metav1.NewTime(time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)),
			Labels:            map[string]string{"kubevirt.io/nodeName": "node01", "kubevirt.io/vm": name},
			Annotations: map[string]string{"kubevirt.io/latest-observed-api-version": "v1",
				"kubevirt.io/storage-observed-api-version": "v1"},
			Finalizers: []string{"kubevirt.io/virtualMachineControllerFinalize", "foregroundDeleteVirtualMachine"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "kubevirt.io/v1", Kind: "VirtualMachine", Name: name,
				UID: uuid.NewUUID(), Controller: ptr(true), BlockOwnerDeletion: ptr(true)}},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "virt-controller", Operation: metav1.ManagedFieldsOperationUpdate,
				APIVersion: "kubevirt.io/v1", FieldsType: "FieldsV1",
				FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:metadata":{"f:labels":{".":{},"f:kubevirt.io/vm":{}}}}`)}}},
		},
		Spec: testguest.VMISpec(testguest.KernelArgs+" harness.poweroff=3", 0),
		Status: v1.VirtualMachineInstanceStatus{Phase: v1.Running, NodeName: "node01", QOSClass: ptr(k8sv1.PodQOSBurstable),
			LauncherContainerImageVersion: "quay.io/kubevirt/virt-launcher:v1.6.0",
			Conditions:                    []v1.VirtualMachineInstanceCondition{{Type: v1.VirtualMachineInstanceReady, Status: k8sv1.ConditionTrue}}},
	}
	return render(vmi)
}

func ptr[T any](v T) *T { return &v }

// forwardedPort is the host address of the Running event's port named
// name.
func forwardedPort(running launcherapi.Event, name string) string {
	Expect(running.Running).NotTo(BeNil(), "Running carries no values")
	for _, p := range running.Running.Ports {
		if p.Name == name {
			Expect(p.Protocol).To(Equal("TCP"))
			Expect(p.Interface).To(Equal("default"))
			return net.JoinHostPort(p.HostAddress, strconv.Itoa(p.HostPort))
		}
	}
	Fail(fmt.Sprintf("no port %q in %+v", name, running.Running.Ports))
	return ""
}

// answer connects to addr and reads what the guest sends.
func answer(addr string) string {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return err.Error()
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
	b, err := io.ReadAll(c)
	if err != nil && len(b) == 0 {
		return err.Error()
	}
	return string(b)
}

// bootTimeout is how long a cloud guest boot may take here: ~2 min alone
// under TCG, two at once on a shared two-core machine.
const bootTimeout = 10 * time.Minute

var _ = Describe("the cloud guest", func() {
	It("boots a VirtualMachine from an OCI archive with NoCloud, a claim and a port (BIOS), and under EFI with a ConfigDrive, both at once", func() {
		claims := filepath.Join(suiteDir, "claims")
		Expect(os.MkdirAll(filepath.Join(claims, "rv-claim"), 0o755)).To(Succeed())
		claim := filepath.Join(claims, "rv-claim", "disk.img")
		Expect(os.WriteFile(claim, make([]byte, 1<<20), 0o644)).To(Succeed())
		DeferCleanup(os.RemoveAll, claims)

		a := Start(noCloudVM("rv-nocloud"), "realvms", "rv-nocloud", "--image-dir", ociImages(), "--claim-dir", claims)
		b := Start(efiVMI("rv-efi", configDrive), "realvms", "rv-efi", "--image-dir", ociImages())

		runningA := a.WaitFor(launcherapi.EventRunning, 2*time.Minute)
		Expect(a.LogLines("the manifest is a VirtualMachine: its template runs as one VMI, one attempt")).To(HaveLen(1))
		addr := forwardedPort(runningA, "answer")
		b.WaitFor(launcherapi.EventRunning, 2*time.Minute)
		Expect(qemuCmdline(b.Domain)).To(ContainSubstring("OVMF_CODE"), "QEMU of %s runs OVMF", b.Domain)
		Expect(qemuCmdline(a.Domain)).NotTo(ContainSubstring("OVMF"), "QEMU of %s runs SeaBIOS", a.Domain)

		bootA := a.ConsoleShows("REALVMS-NOCLOUD-SCRIPT-RAN", bootTimeout)
		a.ConsoleShows("REALVMS-NOCLOUD-LISTENING", time.Minute)
		Eventually(answer).WithArguments(addr).WithTimeout(time.Minute).WithPolling(time.Second).
			Should(ContainSubstring("REALVMS-GUEST-ANSWER"))
		bootB := b.ConsoleShows("REALVMS-CONFIGDRIVE-SCRIPT-RAN", bootTimeout)

		for _, l := range []*Launch{a, b} {
			l.Stop()
		}
		for _, l := range []*Launch{a, b} {
			Expect(l.Exit(2 * time.Minute)).To(Equal(0))
			Expect(final(l)).To(Equal("Succeeded"))
		}
		data, err := os.ReadFile(claim)
		Expect(err).NotTo(HaveOccurred())
		Expect(string(data[:64])).To(HavePrefix("REALVMS-CLAIM-WRITTEN\n"), "the guest's write, read on the host after the launcher exited")

		extracted := append(a.LogLines(`msg="containerDisk extracted"`), b.LogLines(`msg="containerDisk extracted"`)...)
		Expect(extracted).To(HaveLen(1), "one of the two launches extracts the OCI archive, the other uses its copy")
		AddReportEntry("cloud guest boot to the cloud-init marker (TCG, two at once)",
			fmt.Sprintf("BIOS+NoCloud %.0fs, EFI+ConfigDrive %.0fs", bootA.Seconds(), bootB.Seconds()))
		GinkgoWriter.Printf("BIOS+NoCloud marker after %s, EFI+ConfigDrive marker after %s\n%s\n", bootA, bootB, strings.Join(extracted, "\n"))
	})

	It("extracts an OCI containerDisk once and then takes it from the cache", func() {
		cache := filepath.Join(suiteDir, "cache-once", "qemu-capabilities")
		DeferCleanup(os.RemoveAll, filepath.Dir(cache))
		var took []time.Duration
		for _, want := range []int{1, 0} {
			l := Start(efiVMI("rv-efi", configDrive), "realvms", "rv-efi", "--image-dir", ociImages(), "--cache-dir", cache, "--dry-run")
			Expect(l.Exit(time.Minute)).To(Equal(0), l.Log())
			took = append(took, time.Since(l.Started()))
			Expect(l.LogLines(`msg="containerDisk extracted"`)).To(HaveLen(want))
			GinkgoWriter.Printf("%s", strings.Join(l.LogLines(`msg="containerDisk extracted"`), "\n"))
		}
		AddReportEntry("OCI containerDisk, whole dry run", fmt.Sprintf("first (extraction) %s, repeat (cache hit) %s", took[0], took[1]))
	})
})

// qemuCmdline is the command line of the domain's QEMU.
func qemuCmdline(domain string) string {
	pids := qemu.FindQEMU(domain, "")
	Expect(pids).To(HaveLen(1), "one QEMU of %s", domain)
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pids[0]))
	Expect(err).NotTo(HaveOccurred())
	return strings.ReplaceAll(string(b), "\x00", " ")
}

// final is the phase of the launch's final event.
func final(l *Launch) string {
	for _, ev := range l.Events() {
		if ev.Final() {
			return ev.Phase
		}
	}
	return ""
}

var _ = Describe("a cluster dump of the test guest", func() {
	It("boots to GuestReady and names the fields it ignored", func() {
		l := Start(testGuestDump("rv-dump"), "realvms", "rv-dump")
		l.WaitFor(launcherapi.EventGuestReady, 3*time.Minute)
		Expect(l.Exit(time.Minute)).To(Equal(0))
		ignored := l.LogLines("ignored cluster-only fields: ")
		Expect(ignored).To(HaveLen(1))
		for _, f := range []string{"status", "metadata.managedFields", "metadata.resourceVersion", "metadata.ownerReferences",
			"metadata.finalizers", "metadata.generation", "metadata.creationTimestamp", "kubevirt.io/nodeName", "kubevirt.io/latest-observed-api-version"} {
			Expect(ignored[0]).To(ContainSubstring(f))
		}
	})
})

var _ = Describe("manifests refused before anything starts", func() {
	DescribeTable("exit 5 with the named error, no QEMU and no per-VMI folder",
		func(manifest func(claims string) string, want ...string) {
			claims := filepath.Join(suiteDir, "no-claims")
			Expect(os.MkdirAll(claims, 0o755)).To(Succeed())
			l := Start(manifest(claims), "realvms", "rv-refused", "--claim-dir", claims)
			Expect(l.Exit(time.Minute)).To(Equal(int(launcherapi.ExitInvalidManifest)))
			for _, w := range want {
				Expect(l.Log()).To(ContainSubstring(strings.ReplaceAll(w, "CLAIMS", claims)))
			}
			Expect(l.Events()).To(BeEmpty(), "no Scheduled event: nothing started")
			Expect(qemu.FindQEMU(l.Domain, "")).To(BeEmpty())
			entries, _ := os.ReadDir(l.Runtime)
			Expect(entries).To(BeEmpty(), "no per-VMI folder left")
		},
		Entry("two YAML documents", func(string) string {
			return testGuestDump("rv-refused") + "---\n" + testGuestDump("rv-other")
		}, "documents 1 and 2 are both a VirtualMachine or VirtualMachineInstance: one launch runs one VMI"),
		Entry("a cloudInitNoCloud secretRef", func(string) string {
			return efiVMI("rv-refused", v1.VolumeSource{CloudInitNoCloud: &v1.CloudInitNoCloudSource{UserDataSecretRef: &k8sv1.LocalObjectReference{Name: "my-userdata"}}})
		}, "cloudInitNoCloud.secretRef", "no cluster secrets"),
		Entry("a claim without its disk image", func(string) string { return noCloudVM("rv-refused") }, "rv-claim", "CLAIMS/rv-claim/disk.img"),
	)
})
