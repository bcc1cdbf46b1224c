package vmops

import (
	"errors"
	"fmt"
	"net/http"

	k8sv1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	v1 "kubevirt.io/api/core/v1"
)

// Upstream's messages, word for word (typos included).
const (
	// MsgNotRunning refuses a stop without an active VMI.
	MsgNotRunning = "VM is not running"
	// MsgAlreadyRunning refuses a start while a VMI is active.
	MsgAlreadyRunning = "VM is already running"
	// MsgUnderway is the internal error when a start or restart meets
	// pending state-change requests.
	MsgUnderway = "unable to complete request: stop/start already underway"
	// MsgRecoveryRequired refuses a start or restart while a volume
	// migration needs manual recovery.
	MsgRecoveryRequired = "VM recovery required: Volume migration failed, leaving some volumes pointing to non-consistent targets; manual intervention is needed to reassign them to their original volumes."
	// MsgRerunOnFailureFailed refuses a start of RerunOnFailure after a
	// Failed VMI.
	MsgRerunOnFailureFailed = "RerunOnFailure does not support starting VM from failed state"
	// MsgHaltedStopGrace refuses a stop of Halted without a shorter grace
	// period.
	MsgHaltedStopGrace = "Halted only supports manual stop requests with a shorter graceperiod"
	// MsgForceRestartGrace is the bad request for a restart grace period
	// above zero.
	MsgForceRestartGrace = "For force restart, only gracePeriod=0 is supported for now"
	// MsgNegativeGrace is the bad request for a negative restart grace
	// period.
	MsgNegativeGrace = "gracePeriod has to be greater or equal to 0"
)

// msgNoManualStart refuses a start of Always or Once.
func msgNoManualStart(s v1.VirtualMachineRunStrategy) string {
	return fmt.Sprintf("%s does not support manual start requests", s)
}

// msgNoManualRestart refuses a restart of Halted or Once ("RunStategy" is
// upstream's spelling).
func msgNoManualRestart(s v1.VirtualMachineRunStrategy) string {
	return fmt.Sprintf("RunStategy %s does not support manual restart requests", s)
}

// msgRestartNotRunning refuses a restart without a VMI; upstream names
// Halted whatever the run strategy.
func msgRestartNotRunning() string {
	return fmt.Sprintf("%s: %s", MsgNotRunning, v1.RunStrategyHalted)
}

// DeviationStopRerunOnFailure names the one deliberate deviation of this
// package: see the package documentation.
const DeviationStopRerunOnFailure = "stop-rerun-on-failure-without-vmi"

// Op is a manual operation.
type Op string

// The manual operations.
const (
	OpStart   Op = "start"
	OpStop    Op = "stop"
	OpRestart Op = "restart"
)

// Rules selects the deviations from virt-api's rules. The zero value is
// KubeVirt v1.6.0 exactly.
type Rules struct {
	// StopRerunOnFailureWithoutVMI accepts a stop of a RerunOnFailure VM
	// with no active VMI (none, or a final one: its crash-loop backoff)
	// by setting the run strategy to Halted, dropping the pending
	// state-change requests and removing status.startFailure, as KubeVirt's
	// crash-loop change promised. Off, such a stop is refused with 409
	// "VM is not running", as in v1.6.0.
	StopRerunOnFailureWithoutVMI bool
}

// Upstream is KubeVirt v1.6.0's rules exactly.
func Upstream() Rules { return Rules{} }

// Ours is this project's rules: upstream's, plus
// StopRerunOnFailureWithoutVMI.
func Ours() Rules { return Rules{StopRerunOnFailureWithoutVMI: true} }

// Outcome is virt-api's answer to one manual operation.
type Outcome struct {
	// Op is the operation answered.
	Op Op
	// Code is the HTTP status: 202 accepted, 400, 409 or 500.
	Code int
	// Message is upstream's message for a refusal, without the API
	// error's wrapping (see Err); empty when accepted.
	Message string
	// Patch is the side effects. A refusal can still carry one: a stop
	// with a grace period patches the live VMI's grace period before the
	// run strategy is looked at, as upstream.
	Patch Patch
	// Deviation names the deviation that made this outcome differ from
	// upstream's, empty when it is upstream's.
	Deviation string
}

// Accepted reports whether the operation was accepted (202).
func (o Outcome) Accepted() bool { return o.Code == http.StatusAccepted }

// Err is the API error virt-api writes for a refusal, with its full
// message (for example `Operation cannot be fulfilled on
// virtualmachine.kubevirt.io "vm": VM is not running`); nil when accepted.
func (o Outcome) Err(vmName string) *apierrors.StatusError {
	switch o.Code {
	case http.StatusAccepted:
		return nil
	case http.StatusConflict:
		return apierrors.NewConflict(v1.Resource("virtualmachine"), vmName, errors.New(o.Message))
	case http.StatusBadRequest:
		return apierrors.NewBadRequest(o.Message)
	}
	return apierrors.NewInternalError(errors.New(o.Message))
}

// String is the outcome in one line: the code and the message or "accepted".
func (o Outcome) String() string {
	if o.Accepted() {
		return fmt.Sprintf("%s: %d accepted", o.Op, o.Code)
	}
	return fmt.Sprintf("%s: %d %s", o.Op, o.Code, o.Message)
}

// Patch is the side effects of a manual operation, as data. The zero
// value changes nothing.
type Patch struct {
	// RunStrategy, when set, replaces spec.runStrategy (a VM that uses
	// spec.runStrategy).
	RunStrategy *v1.VirtualMachineRunStrategy `json:"runStrategy,omitempty"`
	// Running, when set, replaces spec.running (a VM that uses
	// spec.running).
	Running *bool `json:"running,omitempty"`
	// SetRequests replaces status.stateChangeRequests with
	// StateChangeRequests (nil empties them).
	SetRequests bool `json:"setRequests,omitempty"`
	// StateChangeRequests is the new list when SetRequests is true.
	StateChangeRequests []v1.VirtualMachineStateChangeRequest `json:"stateChangeRequests,omitempty"`
	// RemoveStartFailure removes status.startFailure.
	RemoveStartFailure bool `json:"removeStartFailure,omitempty"`
	// VMIGracePeriodSeconds, when set, replaces the live VMI's
	// spec.terminationGracePeriodSeconds (stop with a grace period).
	VMIGracePeriodSeconds *int64 `json:"vmiGracePeriodSeconds,omitempty"`
	// DeleteLauncherPod asks to delete the VMI's launcher at once (a
	// restart with gracePeriodSeconds 0; upstream deletes the pod with a
	// one-second grace period).
	DeleteLauncherPod bool `json:"deleteLauncherPod,omitempty"`
}

// IsZero reports whether the patch changes nothing.
func (p Patch) IsZero() bool {
	return p.RunStrategy == nil && p.Running == nil && !p.SetRequests && !p.RemoveStartFailure &&
		p.VMIGracePeriodSeconds == nil && !p.DeleteLauncherPod
}

// Apply makes the patch's changes to vm and vmi (which may be nil) in
// memory. Deleting the launcher is left to the caller. A spec change
// bumps vm's generation, as the API server does.
func (p Patch) Apply(vm *v1.VirtualMachine, vmi *v1.VirtualMachineInstance) {
	if p.RunStrategy != nil {
		s := *p.RunStrategy
		vm.Spec.RunStrategy = &s
		vm.Generation++
	}
	if p.Running != nil {
		r := *p.Running
		vm.Spec.Running = &r
		vm.Generation++
	}
	if p.SetRequests {
		vm.Status.StateChangeRequests = append([]v1.VirtualMachineStateChangeRequest(nil), p.StateChangeRequests...)
	}
	if p.RemoveStartFailure {
		vm.Status.StartFailure = nil
	}
	if p.VMIGracePeriodSeconds != nil && vmi != nil {
		g := *p.VMIGracePeriodSeconds
		vmi.Spec.TerminationGracePeriodSeconds = &g
	}
}

// Do answers op with default options: [Rules.Start], [Rules.Stop] or
// [Rules.Restart].
func (r Rules) Do(op Op, vm *v1.VirtualMachine, vmi *v1.VirtualMachineInstance) (Outcome, error) {
	switch op {
	case OpStart:
		return r.Start(vm, vmi, nil), nil
	case OpStop:
		return r.Stop(vm, vmi, nil), nil
	case OpRestart:
		return r.Restart(vm, vmi, nil), nil
	}
	return Outcome{}, fmt.Errorf("unknown operation %q: allowed are %s, %s and %s", op, OpStart, OpStop, OpRestart)
}

func accepted(op Op, p Patch) Outcome { return Outcome{Op: op, Code: http.StatusAccepted, Patch: p} }

func refused(op Op, code int, msg string) Outcome { return Outcome{Op: op, Code: code, Message: msg} }

// Start is virt-api's start subresource: opts may be nil (not paused).
//
//	a live VMI (not final, phase neither Unknown nor unset)  409 VM is already running
//	ManualRecoveryRequired condition                          409 VM recovery required: ...
//	run strategy cannot be determined                         500
//	Halted                                                    202 runStrategy Always (spec.running true);
//	                                                              paused: a {Start, paused} request
//	Manual with a final VMI, RerunOnFailure with a Succeeded  202 {Stop, its UID} and {Start} requests
//	RerunOnFailure with a Failed VMI                          409 RerunOnFailure does not support starting VM from failed state
//	Manual or RerunOnFailure otherwise                        202 a {Start} request
//	Always, Once                                              409 <strategy> does not support manual start requests
//	WaitAsReceiver                                            202, nothing changes
//
// A state-change request is refused with 500 "unable to complete request:
// stop/start already underway" when requests are pending (RerunOnFailure's
// {Start} during its backoff), and removes status.startFailure when
// accepted.
func (r Rules) Start(vm *v1.VirtualMachine, vmi *v1.VirtualMachineInstance, opts *v1.StartOptions) Outcome {
	if vmi != nil && !vmi.IsFinal() && vmi.Status.Phase != v1.Unknown && vmi.Status.Phase != v1.VmPhaseUnset {
		return refused(OpStart, http.StatusConflict, MsgAlreadyRunning)
	}
	if hasCondition(vm, v1.VirtualMachineManualRecoveryRequired) {
		return refused(OpStart, http.StatusConflict, MsgRecoveryRequired)
	}
	paused := opts != nil && opts.Paused
	start := v1.VirtualMachineStateChangeRequest{Action: v1.StartRequest}
	if paused {
		start.Data = map[string]string{v1.StartRequestDataPausedKey: v1.StartRequestDataPausedTrue}
	}
	strategy, err := vm.RunStrategy()
	if err != nil {
		return refused(OpStart, http.StatusInternalServerError, err.Error())
	}
	switch strategy {
	case v1.RunStrategyHalted:
		// Upstream compares the template's StartStrategy pointer with a
		// fresh local's address, which never matches: a paused start
		// always goes through a request.
		if paused {
			return changeRequest(OpStart, vm, start)
		}
		return accepted(OpStart, runningPatch(vm, true))
	case v1.RunStrategyRerunOnFailure, v1.RunStrategyManual:
		rerun := strategy == v1.RunStrategyRerunOnFailure
		if (rerun && vmi != nil && vmi.Status.Phase == v1.Succeeded) || (!rerun && vmi != nil && vmi.IsFinal()) {
			uid := vmi.UID
			return changeRequest(OpStart, vm, v1.VirtualMachineStateChangeRequest{Action: v1.StopRequest, UID: &uid}, start)
		}
		if rerun && vmi != nil && vmi.Status.Phase == v1.Failed {
			return refused(OpStart, http.StatusConflict, MsgRerunOnFailureFailed)
		}
		return changeRequest(OpStart, vm, start)
	case v1.RunStrategyAlways, v1.RunStrategyOnce:
		return refused(OpStart, http.StatusConflict, msgNoManualStart(strategy))
	}
	return accepted(OpStart, Patch{})
}

// Stop is virt-api's stop subresource: opts may be nil (no grace period).
// A grace period with a live VMI first patches the VMI's grace period,
// whatever follows.
//
//	run strategy cannot be determined                   500
//	Halted without an active VMI                        409 VM is not running
//	Halted without a grace period shorter than the VMI's 409 Halted only supports manual stop requests with a shorter graceperiod
//	Halted otherwise                                    202 a {Stop, its UID} request
//	Manual or RerunOnFailure without an active VMI      409 VM is not running (RerunOnFailure: see
//	                                                        StopRerunOnFailureWithoutVMI)
//	Manual or RerunOnFailure otherwise                  202 a {Stop, its UID} request, replacing pending ones
//	Always, Once                                        202 runStrategy Halted (spec.running false)
//	WaitAsReceiver                                      202, nothing changes
//
// An accepted {Stop} request removes status.startFailure.
func (r Rules) Stop(vm *v1.VirtualMachine, vmi *v1.VirtualMachineInstance, opts *v1.StopOptions) Outcome {
	strategy, err := vm.RunStrategy()
	if err != nil {
		return refused(OpStop, http.StatusInternalServerError, err.Error())
	}
	var grace *int64
	if opts != nil {
		grace = opts.GracePeriod
	}
	active := vmi != nil && !vmi.IsFinal()
	var vmiPatch Patch
	var oldGrace int64
	if active && grace != nil {
		if vmi.Spec.TerminationGracePeriodSeconds != nil {
			oldGrace = *vmi.Spec.TerminationGracePeriodSeconds
		}
		g := *grace
		vmiPatch.VMIGracePeriodSeconds = &g
	}
	withVMIPatch := func(o Outcome) Outcome {
		o.Patch.VMIGracePeriodSeconds = vmiPatch.VMIGracePeriodSeconds
		return o
	}
	switch strategy {
	case v1.RunStrategyHalted:
		if !active {
			return refused(OpStop, http.StatusConflict, MsgNotRunning)
		}
		if grace == nil || (vmi.Spec.TerminationGracePeriodSeconds != nil && *grace >= oldGrace) {
			return withVMIPatch(refused(OpStop, http.StatusConflict, MsgHaltedStopGrace))
		}
		uid := vmi.UID
		return withVMIPatch(changeRequest(OpStop, vm, v1.VirtualMachineStateChangeRequest{Action: v1.StopRequest, UID: &uid}))
	case v1.RunStrategyRerunOnFailure, v1.RunStrategyManual:
		if !active {
			if strategy == v1.RunStrategyRerunOnFailure && r.StopRerunOnFailureWithoutVMI {
				p := runningPatch(vm, false)
				p.SetRequests = true
				p.RemoveStartFailure = vm.Status.StartFailure != nil
				o := accepted(OpStop, p)
				o.Deviation = DeviationStopRerunOnFailure
				return o
			}
			return refused(OpStop, http.StatusConflict, MsgNotRunning)
		}
		uid := vmi.UID
		return withVMIPatch(changeRequest(OpStop, vm, v1.VirtualMachineStateChangeRequest{Action: v1.StopRequest, UID: &uid}))
	case v1.RunStrategyAlways, v1.RunStrategyOnce:
		p := runningPatch(vm, false)
		p.VMIGracePeriodSeconds = vmiPatch.VMIGracePeriodSeconds
		return accepted(OpStop, p)
	}
	return accepted(OpStop, vmiPatch)
}

// Restart is virt-api's restart subresource: opts may be nil.
//
//	gracePeriodSeconds above 0 / below 0             400
//	VolumesChange condition                          409 VM recovery required: ...
//	run strategy cannot be determined                500
//	Halted, Once                                     409 RunStategy <strategy> does not support manual restart requests
//	no VMI                                           409 VM is not running: Halted
//	otherwise (a final VMI too)                      202 {Stop, its UID} and {Start} requests;
//	                                                     gracePeriodSeconds 0 also deletes the launcher
//
// The requests are refused with 500 "unable to complete request:
// stop/start already underway" when requests are pending, and remove
// status.startFailure when accepted.
func (r Rules) Restart(vm *v1.VirtualMachine, vmi *v1.VirtualMachineInstance, opts *v1.RestartOptions) Outcome {
	var grace *int64
	if opts != nil {
		grace = opts.GracePeriodSeconds
	}
	if grace != nil && *grace > 0 {
		return refused(OpRestart, http.StatusBadRequest, MsgForceRestartGrace)
	}
	if grace != nil && *grace < 0 {
		return refused(OpRestart, http.StatusBadRequest, MsgNegativeGrace)
	}
	if hasCondition(vm, v1.VirtualMachineConditionType(v1.VirtualMachineInstanceVolumesChange)) {
		return refused(OpRestart, http.StatusConflict, MsgRecoveryRequired)
	}
	strategy, err := vm.RunStrategy()
	if err != nil {
		return refused(OpRestart, http.StatusInternalServerError, err.Error())
	}
	if strategy == v1.RunStrategyHalted || strategy == v1.RunStrategyOnce {
		return refused(OpRestart, http.StatusConflict, msgNoManualRestart(strategy))
	}
	if vmi == nil {
		return refused(OpRestart, http.StatusConflict, msgRestartNotRunning())
	}
	uid := vmi.UID
	o := changeRequest(OpRestart, vm,
		v1.VirtualMachineStateChangeRequest{Action: v1.StopRequest, UID: &uid},
		v1.VirtualMachineStateChangeRequest{Action: v1.StartRequest})
	if o.Accepted() && grace != nil {
		o.Patch.DeleteLauncherPod = true
	}
	return o
}

// changeRequest is upstream's getChangeRequestJson: with no pending
// requests the changes are added; a lone stop replaces pending ones; any
// other change with pending requests is an internal error. An accepted
// request also removes status.startFailure.
func changeRequest(op Op, vm *v1.VirtualMachine, changes ...v1.VirtualMachineStateChangeRequest) Outcome {
	loneStop := len(changes) == 1 && changes[0].Action == v1.StopRequest
	if len(vm.Status.StateChangeRequests) > 0 && !loneStop {
		return refused(op, http.StatusInternalServerError, MsgUnderway)
	}
	return accepted(op, Patch{
		SetRequests:         true,
		StateChangeRequests: changes,
		RemoveStartFailure:  vm.Status.StartFailure != nil,
	})
}

// runningPatch is upstream's getRunningPatch: Always or Halted in
// spec.runStrategy, or true or false in spec.running for a VM that uses
// that field.
func runningPatch(vm *v1.VirtualMachine, running bool) Patch {
	if vm.Spec.RunStrategy != nil {
		s := v1.RunStrategyHalted
		if running {
			s = v1.RunStrategyAlways
		}
		return Patch{RunStrategy: &s}
	}
	return Patch{Running: &running}
}

// hasCondition reports whether vm has the condition with status True.
func hasCondition(vm *v1.VirtualMachine, t v1.VirtualMachineConditionType) bool {
	for _, c := range vm.Status.Conditions {
		if c.Type == t && c.Status == k8sv1.ConditionTrue {
			return true
		}
	}
	return false
}
