package monitor

import (
	"log/slog"
	"time"

	"k8s.io/apimachinery/pkg/watch"
	v1 "kubevirt.io/api/core/v1"

	notifyclient "kubevirt.io/kubevirt/pkg/virt-launcher/notify-client"
	"kubevirt.io/kubevirt/pkg/virt-launcher/virtwrap/api"
)

// notice is one message for virt-handler: a domain event, or (domain nil)
// a Kubernetes event about the VMI.
type notice struct {
	kind     watch.EventType
	domain   *api.Domain
	vmi      *v1.VirtualMachineInstance
	severity string
	reason   string
	message  string
}

// notifier sends notices in order on one goroutine through KubeVirt's own
// notify client, so that an absent or slow virt-handler (the client retries
// each send for 20 s) never blocks a command RPC. As in KubeVirt's
// launcher, a notice that could not be sent is logged and dropped.
type notifier struct {
	client *notifyclient.Notifier
	queue  chan notice
	done   chan struct{}
	log    *slog.Logger
}

func newNotifier(shareDir string, log *slog.Logger) *notifier {
	n := &notifier{client: notifyclient.NewNotifier(shareDir), queue: make(chan notice, 64), done: make(chan struct{}), log: log}
	go n.loop()
	return n
}

func (n *notifier) loop() {
	defer close(n.done)
	for m := range n.queue {
		if m.domain != nil {
			if err := n.client.SendDomainEvent(watch.Event{Type: m.kind, Object: m.domain}); err != nil {
				n.log.Warn("could not send the domain event to virt-handler", "type", m.kind, "state", m.domain.Status.Status, "err", err)
			}
			continue
		}
		if err := n.client.SendK8sEvent(m.vmi, m.severity, m.reason, m.message); err != nil {
			n.log.Warn("could not send the Kubernetes event to virt-handler", "reason", m.reason, "err", err)
		}
	}
}

// domainEvent queues a domain event with a copy of d.
func (n *notifier) domainEvent(kind watch.EventType, d *api.Domain) {
	n.queue <- notice{kind: kind, domain: d.DeepCopy()}
}

// k8sEvent queues a Kubernetes event about vmi.
func (n *notifier) k8sEvent(vmi *v1.VirtualMachineInstance, severity, reason, message string) {
	n.queue <- notice{vmi: vmi.DeepCopy(), severity: severity, reason: reason, message: message}
}

// close sends what is queued and closes the connection.
func (n *notifier) close() {
	close(n.queue)
	<-n.done
	n.client.Close()
}

// closeWithin is close, giving up after d (an absent virt-handler would
// hold every queued notice for 20 s).
func (n *notifier) closeWithin(d time.Duration) {
	done := make(chan struct{})
	go func() { n.close(); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
		n.log.Warn("gave up sending the last notices to virt-handler", "after", d)
	}
}
