package backoff

import (
	"fmt"
	"time"

	k8sv1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	v1 "kubevirt.io/api/core/v1"
)

// ReasonFailedCreate is the reason upstream gives a VMI whose launcher
// (virt-launcher pod) could not be created.
const ReasonFailedCreate = "FailedCreate"

// FailedCreateCondition is the condition upstream's VMI controller puts on
// a VMI whose launcher could not be created: Synchronized, status False,
// reason FailedCreate, "failed to create virtual machine pod: <err>". The
// VMI stays Pending, so such a launcher failure is not a start failure
// (rule C19): [Tracker.Sync] leaves the record as it is for a Pending VMI,
// and the controller retries the launcher instead.
func FailedCreateCondition(err error, at time.Time) v1.VirtualMachineInstanceCondition {
	return v1.VirtualMachineInstanceCondition{
		Type:               v1.VirtualMachineInstanceSynchronized,
		Status:             k8sv1.ConditionFalse,
		Reason:             ReasonFailedCreate,
		Message:            fmt.Sprintf("failed to create virtual machine pod: %v", err),
		LastTransitionTime: metav1.NewTime(at),
	}
}
