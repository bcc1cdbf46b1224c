package conformance_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"k8s.io/apimachinery/pkg/watch"

	cmdclient "kubevirt.io/kubevirt/pkg/virt-handler/cmd-client"
	"kubevirt.io/kubevirt/pkg/virt-launcher/virtwrap/api"

	"github.com/crashloop-harness/crashloop/kubevirtmode/handlerside"
	"github.com/crashloop-harness/crashloop/pkg/faults"
)

// bootTimeout bounds Sync → Running under TCG (a warm start takes about a
// second; the first of the suite probes QEMU).
const bootTimeout = 90 * time.Second

// runningPod starts a pod, syncs its VMI and waits for Running.
func runningPod(spec podSpec) *pod {
	p := startPod(spec)
	c := p.connect()
	start := time.Now()
	Expect(c.SyncVirtualMachine(p.vmi, nil)).To(Succeed(), "pod log:\n%s", p.out)
	AddReportEntry("sync-running", time.Since(start).String())
	p.waitState(api.Running, api.ReasonUnknown, bootTimeout)
	return p
}

// waitGuestReady waits for the test guest's ready marker on its console
// (our launcher's console file, in the pod's ephemeral-disks volume).
func (p *pod) waitGuestReady() {
	Eventually(func() string {
		files, _ := filepath.Glob(filepath.Join(p.root, "volumes", "ephemeral-disks", "crashloop", "start-*", "console.log"))
		var all strings.Builder
		for _, f := range files {
			data, _ := os.ReadFile(f)
			all.Write(data)
		}
		return all.String()
	}).WithTimeout(60*time.Second).WithPolling(100*time.Millisecond).Should(ContainSubstring("HARNESS-GUEST-READY"), "pod log:\n%s", p.out)
}

// deleteAndExit is virt-handler's end of a VMI: DeleteVirtualMachine, the
// final delete notification, the pod's exit 0, its socket gone.
func (p *pod) deleteAndExit() {
	Expect(p.client.DeleteDomain(p.vmi)).To(Succeed())
	d := p.waitState(api.NoState, api.ReasonNonExistent, 30*time.Second)
	Expect(d.DeletionTimestamp).NotTo(BeNil(), "the final delete notification carries a deletion timestamp")
	Expect(p.waitExit(30 * time.Second)).To(Equal(0))
	_, err := os.Stat(p.socket())
	Expect(os.IsNotExist(err)).To(BeTrue(), "the socket is removed on exit")
}

var _ = Describe("the start/stop path", func() {
	It("syncs the VMI to a running domain with Added then Modified events, serves it to GetDomain with the VMI's UID, stays idempotent, and is killed and deleted", func() {
		p := runningPod(podSpec{})
		c := p.client
		Expect(p.seen[0].Type).To(Equal(watch.Added), "first event: %s", describe(p.seen))
		AddReportEntry("events-to-running", describe(p.seen))

		d, exists, err := c.GetDomain()
		Expect(err).NotTo(HaveOccurred())
		Expect(exists).To(BeTrue())
		Expect(d.ObjectMeta.UID).To(Equal(p.vmi.UID))
		Expect(d.Spec.Metadata.KubeVirt.UID).To(Equal(p.vmi.UID))
		Expect(d.Spec.Name).To(Equal(p.vmi.Namespace + "_" + p.vmi.Name))
		Expect(d.Status.Status).To(Equal(api.Running))
		Expect(d.Spec.Metadata.KubeVirt.GracePeriod.DeletionGracePeriodSeconds).To(Equal(*p.vmi.Spec.TerminationGracePeriodSeconds))

		Expect(p.qemuPIDs()).To(HaveLen(1), "one QEMU runs the domain")
		// A non-root launcher pod: every process of it, QEMU included,
		// runs as KubeVirt's qemu user (107).
		users := p.processUsers()
		Expect(users).To(HaveKey(ContainSubstring("qemu-system")), "QEMU is the pod's")
		for proc, uid := range users {
			Expect(uid).To(Equal("107 107 107 107"), "Uid of %s", proc)
		}
		AddReportEntry("uids", fmt.Sprint(users))

		// virt-handler calls Sync on every reconcile: the same domain.
		Expect(c.SyncVirtualMachine(p.vmi, nil)).To(Succeed())
		Expect(c.Ping()).To(Succeed())
		Consistently(p.events).WithTimeout(time.Second).ShouldNot(Receive(HaveField("Type", watch.Added)))

		Expect(c.KillVirtualMachine(p.vmi)).To(Succeed())
		p.waitState(api.Shutoff, api.ReasonDestroyed, 30*time.Second)
		Eventually(p.qemuPIDs).WithTimeout(10*time.Second).Should(BeEmpty(), "Kill leaves no QEMU, before the pod ends")
		p.deleteAndExit()
		AddReportEntry("events-all", describe(p.seen))
	})

	It("shuts the guest down on ShutdownVirtualMachine within the grace period (Shutoff/Shutdown, deletion timestamp in the metadata)", func() {
		p := runningPod(podSpec{})
		p.waitGuestReady()
		start := time.Now()
		Expect(p.client.ShutdownVirtualMachine(p.vmi)).To(Succeed())
		marked := p.nextEvent(10 * time.Second).Object.(*api.Domain)
		Expect(marked.Spec.Metadata.KubeVirt.GracePeriod.DeletionTimestamp).NotTo(BeNil())
		grace := time.Duration(*p.vmi.Spec.TerminationGracePeriodSeconds) * time.Second
		p.waitState(api.Shutoff, api.ReasonShutdown, grace)
		AddReportEntry("shutdown", time.Since(start).String())
		p.deleteAndExit()
	})

	It("keeps a guest that ignores the power button running through the grace period, and Kill at its end destroys it", func() {
		p := runningPod(podSpec{kernelArgs: "console=ttyS0 quiet panic=-1 harness.nopowerbutton"})
		p.waitGuestReady()
		Expect(p.client.ShutdownVirtualMachine(p.vmi)).To(Succeed())
		grace := time.Duration(*p.vmi.Spec.TerminationGracePeriodSeconds) * time.Second
		Consistently(func() api.LifeCycle {
			d, _, err := p.client.GetDomain()
			Expect(err).NotTo(HaveOccurred())
			return d.Status.Status
		}).WithTimeout(grace).WithPolling(time.Second).Should(Equal(api.Running))
		Expect(p.client.KillVirtualMachine(p.vmi)).To(Succeed())
		p.waitState(api.Shutoff, api.ReasonDestroyed, 30*time.Second)
		p.deleteAndExit()
	})

	It("stops the guest gracefully when the pod is deleted (SIGTERM), and exits 0 once the domain is gone", func() {
		p := runningPod(podSpec{})
		p.waitGuestReady()
		start := time.Now()
		Expect(podmanKill(p, "TERM")).To(Succeed())
		d := p.waitState(api.Shutoff, api.ReasonShutdown, 30*time.Second)
		Expect(d.Spec.Metadata.KubeVirt.GracePeriod.MarkedForGracefulShutdown).To(HaveValue(BeTrue()))
		Expect(p.waitExit(30 * time.Second)).To(Equal(0))
		AddReportEntry("sigterm-to-exit", time.Since(start).String())
	})

	It("destroys a guest that ignores the power button at --grace-period-seconds after the pod's SIGTERM", func() {
		p := runningPod(podSpec{kernelArgs: "console=ttyS0 quiet panic=-1 harness.nopowerbutton",
			extra: []string{"--grace-period-seconds", "3"}})
		p.waitGuestReady()
		start := time.Now()
		Expect(podmanKill(p, "TERM")).To(Succeed())
		p.waitState(api.Shutoff, api.ReasonDestroyed, 30*time.Second)
		Expect(time.Since(start)).To(BeNumerically(">=", 3*time.Second))
		Expect(p.waitExit(30 * time.Second)).To(Equal(0))
	})

	It("keeps the domain when virt-handler goes away, and serves a new client and notify server", func() {
		p := runningPod(podSpec{})
		p.client.Close()
		p.client = nil
		p.stopHandler()
		// Upstream's launcher does not watch its clients: the guest runs on.
		Consistently(p.exited).WithTimeout(3 * time.Second).ShouldNot(BeClosed())
		p.restartHandler()
		c := p.connect()
		d, exists, err := c.GetDomain()
		Expect(err).NotTo(HaveOccurred())
		Expect(exists).To(BeTrue())
		Expect(d.Status.Status).To(Equal(api.Running))
		Expect(c.KillVirtualMachine(p.vmi)).To(Succeed())
		p.waitState(api.Shutoff, api.ReasonDestroyed, 30*time.Second)
		p.deleteAndExit()
	})
})

// heldStart starts a pod whose QEMU qemu-slow-start holds for hold before
// Running, syncs it on one client (its result on synced) and, once the
// pushed Shutoff/Unknown came, connects a second client (closed after the
// spec), as virt-handler acting on the domain while the first Sync waits.
func heldStart(hold string) (p *pod, c cmdclient.LauncherClient, synced chan error, second cmdclient.LauncherClient) {
	p = startPod(podSpec{annotations: map[string]string{faults.AnnotationPrefix + "qemu-slow-start": "after=" + hold}})
	c = p.connect()
	synced = make(chan error, 1)
	go func() { synced <- c.SyncVirtualMachine(p.vmi, nil) }()
	p.waitState(api.Shutoff, api.ReasonUnknown, bootTimeout)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	second, err := handlerside.Connect(ctx, p.socket(), p.exited)
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(second.Close)
	return p, c, synced, second
}

var _ = Describe("a domain whose QEMU is starting", func() {
	It("is Paused/StartingUp to GetDomain, as libvirt's state reads, while the pushed events say Shutoff/Unknown, so a restarted virt-handler's listing finds it alive", func() {
		// A second client, as virt-handler restarted during the start.
		p, c, synced, relisted := heldStart("6s")
		d, exists, err := relisted.GetDomain()
		Expect(err).NotTo(HaveOccurred())
		Expect(exists).To(BeTrue())
		Expect(synced).NotTo(Receive(), "Sync returned before the held QEMU ran")
		Expect(string(d.Status.Status) + "/" + string(d.Status.Reason)).To(Equal("Paused/StartingUp"))
		AddReportEntry("pushed-while-starting", describe(p.seen))

		Eventually(synced).WithTimeout(bootTimeout).Should(Receive(BeNil()), "pod log:\n%s", p.out)
		p.waitState(api.Running, api.ReasonUnknown, 30*time.Second)
		d, _, err = relisted.GetDomain()
		Expect(err).NotTo(HaveOccurred())
		Expect(d.Status.Status).To(Equal(api.Running))
		Expect(c.KillVirtualMachine(p.vmi)).To(Succeed())
		p.waitState(api.Shutoff, api.ReasonDestroyed, 30*time.Second)
		p.deleteAndExit()
	})

	It("is undefined by DeleteVirtualMachine only once its start ends, and runs on as a transient domain (libvirt's undefine, as KubeVirt's DeleteVMI); the final notification and the exit come when it is killed", func() {
		// virt-handler v1.6.0 deletes a domain it takes for inactive
		// (pushed Shutoff/Unknown while the start is in flight), on a
		// client of its own while the first Sync waits.
		p, c, synced, deleter := heldStart("4s")
		start := time.Now()
		Expect(deleter.DeleteDomain(p.vmi)).To(Succeed())
		AddReportEntry("delete-during-start", fmt.Sprintf("DeleteVirtualMachine returned after %v, once the held start ended", time.Since(start).Round(100*time.Millisecond)))
		Eventually(synced).WithTimeout(bootTimeout).Should(Receive(BeNil()), "the start goes on; pod log:\n%s", p.out)
		p.waitState(api.Running, api.ReasonUnknown, 30*time.Second)
		Consistently(p.exited).WithTimeout(3*time.Second).ShouldNot(BeClosed(), "the undefined domain runs on, and so does the pod")
		Expect(p.qemuPIDs()).To(HaveLen(1))
		d, exists, err := deleter.GetDomain()
		Expect(err).NotTo(HaveOccurred())
		Expect(exists).To(BeTrue())
		Expect(d.Status.Status).To(Equal(api.Running))
		Expect(c.KillVirtualMachine(p.vmi)).To(Succeed())
		d = p.waitState(api.NoState, api.ReasonNonExistent, 30*time.Second)
		Expect(d.DeletionTimestamp).NotTo(BeNil())
		Expect(p.waitExit(30 * time.Second)).To(Equal(0))
	})
})
