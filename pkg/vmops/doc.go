// Package vmops is virt-api's start, stop and restart subresource rules of
// KubeVirt v1.6.0 (pkg/virt-api/rest/lifecycle.go, StartVMRequestHandler,
// StopVMRequestHandler and RestartVMRequestHandler) as pure functions over
// kubevirt.io/api types.
//
// Given the VM (its spec.runStrategy or spec.running, its conditions and
// its status with stateChangeRequests and startFailure) and its VMI (nil
// when there is none), [Rules.Start], [Rules.Stop] and [Rules.Restart]
// decide what virt-api would: accept (202) or refuse (409 conflict, 400 bad
// request, 500 internal error) with upstream's message word for word, and
// the side effects as data ([Patch]): the spec's run strategy, the new
// state-change requests, the removal of status.startFailure, the VMI's
// grace period and the launcher pod's deletion. Nothing here talks to an
// API server or reads a clock; a controller applies the Patch itself
// ([Patch.Apply]) and lets its reconcile carry the requests out
// (pkg/backoff's NextStep).
//
// # The one deliberate deviation
//
// KubeVirt's crash-loop change (kubevirt/kubevirt#5905, "Functional tests to
// validate stop is always possible during crash loop") promised that a VM
// in a crash loop can always be stopped; it stopped Always and
// RerunOnFailure alike by setting the run strategy to Halted. KubeVirt
// v1.6.0 sends RerunOnFailure to the state-change-request path instead,
// which answers 409 "VM is not running" when there is no active VMI, the
// very state of a RerunOnFailure VM in its backoff. With
// [Rules.StopRerunOnFailureWithoutVMI] (on in [Ours], off in [Upstream])
// such a stop is accepted: the run strategy becomes Halted, the pending
// {action: Start} the controller added is dropped (else the controller
// turns Halted back into Always) and status.startFailure is removed.
//
// [FidelityRules] lists every rule of this package (section E) after
// pkg/backoff's, for the README's fidelity table.
package vmops
