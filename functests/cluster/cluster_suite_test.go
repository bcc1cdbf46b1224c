package cluster_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	k8sv1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	v1 "kubevirt.io/api/core/v1"
	"kubevirt.io/client-go/kubecli"

	"github.com/crashloop-harness/crashloop/functests/cluster"
)

const failFast = "kubevirt.io/func-test-virt-launcher-fail-fast"

var client kubecli.KubevirtClient

func TestCluster(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "KubeVirt cluster lane", Label("cluster"))
}

// skipLane says in one line why the lane does not run, and skips it.
func skipLane(reason string) {
	fmt.Println("cluster lane skipped: " + reason)
	Skip("cluster lane skipped: " + reason)
}

var _ = BeforeSuite(func() {
	kubeconfig := os.Getenv("KUBECONFIG")
	if kubeconfig == "" {
		skipLane("KUBECONFIG is not set (point it at a KubeVirt cluster to run this lane)")
	}
	var err error
	client, err = kubecli.GetKubevirtClientFromFlags("", kubeconfig)
	if err != nil {
		skipLane(fmt.Sprintf("KUBECONFIG %s gives no client: %v", kubeconfig, err))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := client.VirtualMachine(k8sv1.NamespaceDefault).List(ctx, metav1.ListOptions{Limit: 1}); err != nil {
		skipLane(fmt.Sprintf("the cluster at KUBECONFIG %s does not serve KubeVirt VirtualMachines: %v", kubeconfig, err))
	}
})

// crashingVM is a small VM whose launcher crashes at once (KubeVirt's own
// fail-fast annotation) under the given run strategy.
func crashingVM(strategy v1.VirtualMachineRunStrategy) *v1.VirtualMachine {
	return &v1.VirtualMachine{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "crashloop-", Namespace: namespace()},
		Spec: v1.VirtualMachineSpec{
			RunStrategy: &strategy,
			Template: &v1.VirtualMachineInstanceTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{failFast: ""}},
				Spec: v1.VirtualMachineInstanceSpec{Domain: v1.DomainSpec{
					Resources: v1.ResourceRequirements{Requests: k8sv1.ResourceList{k8sv1.ResourceMemory: resourceMust("128Mi")}},
					Devices:   v1.Devices{Disks: []v1.Disk{{Name: "containerdisk"}}},
				},
					Volumes: []v1.Volume{{Name: "containerdisk", VolumeSource: v1.VolumeSource{ContainerDisk: &v1.ContainerDiskSource{
						Image: envOr("CLUSTER_LANE_IMAGE", "quay.io/kubevirt/cirros-container-disk-demo:latest")}}}}},
			},
		},
	}
}

func namespace() string { return envOr("CLUSTER_LANE_NAMESPACE", k8sv1.NamespaceDefault) }

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// recorder polls the VM's VMIs and keeps every attempt it saw.
type recorder struct {
	vm       *v1.VirtualMachine
	attempts map[types.UID]cluster.Attempt
}

func (r *recorder) poll(ctx context.Context) *v1.VirtualMachine {
	vm, err := client.VirtualMachine(r.vm.Namespace).Get(ctx, r.vm.Name, metav1.GetOptions{})
	Expect(err).NotTo(HaveOccurred())
	vmi, err := client.VirtualMachineInstance(r.vm.Namespace).Get(ctx, r.vm.Name, metav1.GetOptions{})
	if err == nil {
		r.attempts[vmi.UID] = cluster.AttemptFrom(vmi)
	}
	return vm
}

func (r *recorder) list() []cluster.Attempt {
	var out []cluster.Attempt
	for _, a := range r.attempts {
		out = append(out, a)
	}
	return out
}

func failCount(vm *v1.VirtualMachine) int {
	if vm.Status.StartFailure == nil {
		return 0
	}
	return vm.Status.StartFailure.ConsecutiveFailCount
}

var _ = Describe("KubeVirt's crash-loop backoff on a real cluster", func() {
	DescribeTable("a fail-fast VM loops inside the envelope, stops on request, and recovers when the annotation goes",
		func(strategy v1.VirtualMachineRunStrategy) {
			ctx := context.Background()
			vm, err := client.VirtualMachine(namespace()).Create(ctx, crashingVM(strategy), metav1.CreateOptions{})
			Expect(err).NotTo(HaveOccurred())
			DeferCleanup(func() {
				_ = client.VirtualMachine(vm.Namespace).Delete(context.Background(), vm.Name, metav1.DeleteOptions{})
			})
			rec := &recorder{vm: vm, attempts: map[types.UID]cluster.Attempt{}}
			By("crash looping to a failure count of 3")
			Eventually(func() int { return failCount(rec.poll(ctx)) }).WithTimeout(6 * time.Minute).WithPolling(500 * time.Millisecond).Should(BeNumerically(">=", 3))
			Expect(rec.poll(ctx).Status.PrintableStatus).To(Equal(v1.VirtualMachineStatusCrashLoopBackOff))
			Expect(cluster.CheckEnvelope(cluster.Gaps(rec.list(), 1), 2*time.Second)).To(Succeed())

			By("stopping it in the middle of the loop")
			Expect(client.VirtualMachine(vm.Namespace).Stop(ctx, vm.Name, &v1.StopOptions{})).To(Succeed())
			Eventually(func() v1.VirtualMachinePrintableStatus { return rec.poll(ctx).Status.PrintableStatus }).WithTimeout(time.Minute).Should(Equal(v1.VirtualMachineStatusStopped))
			Expect(rec.poll(ctx).Status.StartFailure).To(BeNil(), "a manual stop clears the record")

			By("removing the fail-fast annotation and starting it again")
			patch, err := cluster.RemoveTemplateAnnotationPatch(failFast)
			Expect(err).NotTo(HaveOccurred())
			_, err = client.VirtualMachine(vm.Namespace).Patch(ctx, vm.Name, types.JSONPatchType, patch, metav1.PatchOptions{})
			Expect(err).NotTo(HaveOccurred())
			Expect(client.VirtualMachine(vm.Namespace).Start(ctx, vm.Name, &v1.StartOptions{})).To(Succeed())
			Eventually(func() v1.VirtualMachinePrintableStatus { return rec.poll(ctx).Status.PrintableStatus }).WithTimeout(5 * time.Minute).Should(Equal(v1.VirtualMachineStatusRunning))
			Expect(rec.poll(ctx).Status.StartFailure).To(BeNil())
		},
		Entry("runStrategy Always", v1.RunStrategyAlways),
		Entry("runStrategy RerunOnFailure", v1.RunStrategyRerunOnFailure),
	)
})
