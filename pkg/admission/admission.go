// Package admission is what KubeVirt's VMI admission refuses, for one
// machine. In a cluster virt-api's validating webhook (and the CRD's
// schema) refuses a VMI before any node sees it; a launcher that reads a
// manifest itself must refuse the same, and more: names that end up in
// file paths or on QEMU's command line. Admit runs in the converter stage
// (pkg/launchprep) once the VMI is read and defaulted, before anything is
// written or started, for manifests given on the command line and VMIs
// that KubeVirt mode hands over alike.
//
// Each refusal names the field, quotes the value (cut to about 200 bytes)
// and says what is allowed, in KubeVirt's words where KubeVirt has a rule
// (read from v1.9.0: pkg/virt-api/webhooks/validating-webhook/admitters,
// pkg/storage/admitters, pkg/network/admitter, the CRD's MaxItems), in
// Kubernetes' words for object names. Feature gates (HostDisk, Sidecar)
// come from the launcher's --feature-gates. The topology rule (vCPUs) is
// shared with the converter, which applies it again, overflow-proof.
package admission

import (
	"fmt"
	"strings"

	v1 "kubevirt.io/api/core/v1"

	"github.com/crashloop-harness/crashloop/pkg/launcherapi"
)

// Input is what Admit looks at.
type Input struct {
	// VMI is the VMI after KubeVirt's defaults (pkg/kvdefaults).
	VMI *v1.VirtualMachineInstance
	// DataVolumeTemplates are the VM's, whose names become claim folders.
	DataVolumeTemplates []v1.DataVolumeTemplateSpec
	// FeatureGates are the gates switched on (launcherapi.Args.FeatureGates).
	FeatureGates []string
}

// Admit refuses the VMI with an *Error listing every cause, or returns nil.
func Admit(in Input) error {
	vmi := in.VMI
	var c causes
	checkMeta(&c, vmi)
	checkCounts(&c, &vmi.Spec)
	checkDisks(&c, vmi.Spec.Domain.Devices.Disks)
	checkVolumes(&c, vmi.Spec.Volumes, in.FeatureGates)
	checkDataVolumes(&c, in.DataVolumeTemplates)
	checkNetworks(&c, &vmi.Spec)
	checkDomain(&c, &vmi.Spec)
	checkSidecars(&c, vmi.Annotations, in.FeatureGates)
	if len(c) == 0 {
		return nil
	}
	return &Error{Causes: c}
}

// Cause is one refused field.
type Cause struct {
	// Field is the field's path, e.g. spec.domain.devices.interfaces[0].macAddress.
	Field string
	// Value is the refused input, quoted (cut) in the message; HasValue
	// tells an empty value from none (a count, a missing gate).
	Value    string
	HasValue bool
	// Msg says what is wrong and what is allowed.
	Msg string
}

// String is the cause's line: field, quoted value, what is allowed.
func (c Cause) String() string {
	if !c.HasValue {
		return "field " + c.Field + ": " + c.Msg
	}
	return "field " + c.Field + ": " + launcherapi.Quote(c.Value) + ": " + c.Msg
}

// Detail is the message without the field, for callers with their own
// field (the converter's SpecError).
func (c Cause) Detail() string {
	if !c.HasValue {
		return c.Msg
	}
	return launcherapi.Quote(c.Value) + ": " + c.Msg
}

// Error is admission's refusal: every cause, the first maxLines of them
// rendered.
type Error struct{ Causes []Cause }

// maxLines is how many causes an Error renders; a manifest with thousands
// of bad names gets a count of the rest.
const maxLines = 10

// Error renders one line per cause.
func (e *Error) Error() string { return strings.Join(e.Lines(), "\n") }

// Lines are the rendered causes, at most maxLines and a count of the rest.
func (e *Error) Lines() []string {
	var out []string
	for i, c := range e.Causes {
		if i == maxLines {
			out = append(out, fmt.Sprintf("and %d more refused fields", len(e.Causes)-maxLines))
			break
		}
		out = append(out, c.String())
	}
	return out
}

// causes collects refusals.
type causes []Cause

func (c *causes) value(field, value, msg string) {
	*c = append(*c, Cause{Field: field, Value: value, HasValue: true, Msg: msg})
}

func (c *causes) plain(field, msg string) { *c = append(*c, Cause{Field: field, Msg: msg}) }
