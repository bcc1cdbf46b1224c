package admission

import (
	"fmt"
	"regexp"
	"strings"
	"unicode"

	"k8s.io/apimachinery/pkg/util/validation"
	v1 "kubevirt.io/api/core/v1"

	"github.com/crashloop-harness/crashloop/pkg/launcherapi"
)

// Where a name of the VMI goes (file names, libvirt aliases, QEMU's
// -netdev and -device options), it must be one path component and carry
// no option separator: beyond KubeVirt's rules, which already keep out
// most of it, safeName refuses '/', "." and "..", ',', '=', control
// characters and more than maxNameBytes.
const maxNameBytes = 253

// safeName is why name is not a safe name, or "".
func safeName(name string) string {
	switch {
	case name == "." || name == "..":
		return "is not a name"
	case len(name) > maxNameBytes:
		return fmt.Sprintf("is longer than %d bytes", maxNameBytes)
	case strings.ContainsAny(name, "/,="):
		return "contains '/', ',' or '='"
	case strings.IndexFunc(name, unicode.IsControl) >= 0:
		return "contains a control character"
	}
	return ""
}

// checkName refuses name by the Kubernetes rule what (nil when none) and
// by safeName; rule says what is allowed.
func checkName(c *causes, field, name string, what func(string) []string, rule string) {
	var msgs []string
	if what != nil {
		msgs = what(name)
	}
	if why := safeName(name); why != "" {
		msgs = append(msgs, why)
	}
	if len(msgs) > 0 {
		c.value(field, name, strings.Join(msgs, "; ")+" (allowed: "+rule+")")
	}
}

// The names' rules, for messages.
const (
	subdomainRule = "an RFC 1123 subdomain, as Kubernetes names objects: lower case letters, digits, '-' and '.', at most 253 characters"
	labelRule     = "an RFC 1123 label: lower case letters, digits and '-', at most 63 characters"
	uidRule       = "letters, digits, '.', '_' and '-', starting with a letter or digit, at most 128 characters, such as a UUID"
)

// uidPattern is what a UID may be here: Kubernetes sets UUIDs, manifests
// written by hand carry short words; it becomes part of a file name.
var uidPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// checkMeta: the VMI's name is an object name (RFC 1123 subdomain), its
// namespace an RFC 1123 label, as Kubernetes has them; the UID a file-name
// word; spec.hostname an RFC 1123 label, as KubeVirt's admitter has it.
func checkMeta(c *causes, vmi *v1.VirtualMachineInstance) {
	checkName(c, "metadata.name", vmi.Name, validation.IsDNS1123Subdomain, subdomainRule)
	checkName(c, "metadata.namespace", vmi.Namespace, validation.IsDNS1123Label, labelRule)
	if uid := string(vmi.UID); uid != "" && (!uidPattern.MatchString(uid) || uid == "." || uid == "..") {
		c.value("metadata.uid", uid, "is not a UID (allowed: "+uidRule+")")
	}
	if h := vmi.Spec.Hostname; h != "" {
		checkName(c, "spec.hostname", h, validation.IsDNS1123Label, labelRule)
	}
}

// checkDisks: a disk's name is an RFC 1123 label (KubeVirt: "disk name can
// become a container name").
func checkDisks(c *causes, disks []v1.Disk) {
	for i, d := range disks {
		field := fmt.Sprintf("spec.domain.devices.disks[%d]", i)
		checkName(c, field+".name", d.Name, validation.IsDNS1123Label, labelRule)
		if msg := SerialError(d.Serial); msg != "" {
			c.value(field+".serial", d.Serial, field+" "+msg)
		}
	}
}

// checkVolumes: a volume's name is a disk's (an RFC 1123 label); the
// claims it names are object names; the paths inside a containerDisk are
// absolute without relative parts (KubeVirt's ValidatePath); inline
// cloud-init within KubeVirt's caps; hostDisk behind its gate.
func checkVolumes(c *causes, volumes []v1.Volume, gates []string) {
	for i, v := range volumes {
		field := fmt.Sprintf("spec.volumes[%d]", i)
		checkName(c, field+".name", v.Name, validation.IsDNS1123Label, labelRule)
		switch {
		case v.PersistentVolumeClaim != nil:
			checkName(c, field+".persistentVolumeClaim.claimName", v.PersistentVolumeClaim.ClaimName, validation.IsDNS1123Subdomain, subdomainRule)
		case v.Ephemeral != nil && v.Ephemeral.PersistentVolumeClaim != nil:
			checkName(c, field+".ephemeral.persistentVolumeClaim.claimName", v.Ephemeral.PersistentVolumeClaim.ClaimName, validation.IsDNS1123Subdomain, subdomainRule)
		case v.DataVolume != nil:
			checkName(c, field+".dataVolume.name", v.DataVolume.Name, validation.IsDNS1123Subdomain, subdomainRule)
		case v.ContainerDisk != nil && v.ContainerDisk.Path != "":
			checkPath(c, field+".containerDisk.path", v.ContainerDisk.Path)
		case v.HostDisk != nil:
			checkGate(c, field+".hostDisk", launcherapi.GateHostDisk, gates)
		}
		checkCloudInit(c, &v, field)
	}
}

// checkDataVolumes: a dataVolumeTemplate's name is an object name; the
// launcher imports it into the claim folder of that name.
func checkDataVolumes(c *causes, dvs []v1.DataVolumeTemplateSpec) {
	for i, dv := range dvs {
		checkName(c, fmt.Sprintf("spec.dataVolumeTemplates[%d].metadata.name", i), dv.Name, validation.IsDNS1123Subdomain, subdomainRule)
	}
}

// interfaceName is KubeVirt's rule for interface names (and so network
// names, as every network needs an interface of its name).
var interfaceName = regexp.MustCompile(`^[A-Za-z0-9-_]+$`)

// interfaceRule is KubeVirt's message for a bad interface name.
const interfaceRule = "Network interface name can only contain alphabetical characters, numbers, dashes (-) or underscores (_)"

// InterfaceNameError is why name cannot be an interface or network name
// (KubeVirt's rule, and safeName), or "". The converter checks it again
// before a name reaches QEMU's command line.
func InterfaceNameError(name string) string {
	if !interfaceName.MatchString(name) {
		return interfaceRule
	}
	if why := safeName(name); why != "" {
		return why
	}
	return ""
}

// checkNetworks: interface and network names by KubeVirt's rule, MAC
// addresses as KubeVirt parses them, port names as Kubernetes'
// IANA_SVC_NAME (KubeVirt's admitter uses its IsValidPortName).
func checkNetworks(c *causes, spec *v1.VirtualMachineInstanceSpec) {
	for i, iface := range spec.Domain.Devices.Interfaces {
		field := fmt.Sprintf("spec.domain.devices.interfaces[%d]", i)
		if msg := InterfaceNameError(iface.Name); msg != "" {
			c.value(field+".name", iface.Name, msg)
		}
		if msg := MACError(iface.MacAddress); msg != "" {
			c.value(field+".macAddress", iface.MacAddress, "interface "+field+".name has "+msg)
		}
		for j, p := range iface.Ports {
			if p.Name == "" {
				continue
			}
			if msgs := validation.IsValidPortName(p.Name); len(msgs) > 0 || safeName(p.Name) != "" {
				c.value(fmt.Sprintf("%s.ports[%d].name", field, j), p.Name, "Invalid name of the port (allowed: an IANA service name: at most 15 lower case letters, digits and '-', with a letter, no '--', no '-' at either end)")
			}
		}
	}
	for i, n := range spec.Networks {
		if msg := InterfaceNameError(n.Name); msg != "" {
			c.value(fmt.Sprintf("spec.networks[%d].name", i), n.Name, msg+" (a network's name is its interface's)")
		}
	}
}
