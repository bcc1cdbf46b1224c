package admission

import (
	"errors"
	"fmt"
	"math/bits"
	"net"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	v1 "kubevirt.io/api/core/v1"

	"github.com/crashloop-harness/crashloop/pkg/cloudinit"
	"github.com/crashloop-harness/crashloop/pkg/launcherapi"
	"github.com/crashloop-harness/crashloop/pkg/manifest"
)

// MaxItems is the CRD's limit (kubebuilder MaxItems in KubeVirt's
// schema.go and types.go) on spec.domain.devices.disks, .interfaces,
// spec.volumes and spec.networks.
const MaxItems = 256

// checkCounts refuses lists over the CRD's MaxItems, in the API server's
// words.
func checkCounts(c *causes, spec *v1.VirtualMachineInstanceSpec) {
	for _, l := range []struct {
		field string
		n     int
	}{
		{"spec.domain.devices.disks", len(spec.Domain.Devices.Disks)},
		{"spec.domain.devices.interfaces", len(spec.Domain.Devices.Interfaces)},
		{"spec.volumes", len(spec.Volumes)},
		{"spec.networks", len(spec.Networks)},
	} {
		if l.n > MaxItems {
			c.plain(l.field, fmt.Sprintf("Too many: %d: must have at most %d items (KubeVirt's CRD)", l.n, MaxItems))
		}
	}
}

// MACError is why s is not a MAC address KubeVirt takes (net.ParseMAC, at
// most 6 bytes: pkg/network/link's ValidateMacAddress), or "" (also for
// an empty s: no address asked for). The converter renders the parsed
// address, never s.
func MACError(s string) string {
	if s == "" {
		return ""
	}
	const allowed = " (allowed: 6 bytes in hex as net.ParseMAC reads them, e.g. 02:00:00:00:00:01)"
	mac, err := net.ParseMAC(s)
	if err != nil {
		return "malformed MAC address" + allowed
	}
	if len(mac) != 6 {
		return "too long MAC address" + allowed
	}
	return ""
}

// KubeVirt's rule for a disk's serial (pkg/storage/admitters/disks.go).
var serialPattern = regexp.MustCompile(`^[A-Za-z0-9_.+-]+$`)

// maxSerial is KubeVirt's limit on a serial, in characters.
const maxSerial = 256

// SerialError is why a disk's serial is refused, in KubeVirt's words after
// the disk's field, or "".
func SerialError(s string) string {
	switch {
	case s == "":
		return ""
	case !serialPattern.MatchString(s):
		return "must be made up of the following characters [A-Za-z0-9_.+-], if specified"
	case len([]rune(s)) > maxSerial:
		return fmt.Sprintf("must be less than or equal to %d in length, if specified", maxSerial)
	}
	return ""
}

// zonePattern is what an IANA time zone name is made of: words of
// letters, digits, '_', '+' and '-' joined by '/'. No dots, so never "..",
// and never an absolute path.
var zonePattern = regexp.MustCompile(`^[A-Za-z0-9_+-]+(/[A-Za-z0-9_+-]+)*$`)

// TimezoneError is why a clock time zone is refused, or "". KubeVirt v1.9.0
// has no admission rule for it (its schema says "Zone name follows the TZ
// environment variable format (e.g. 'America/New_York')") and libvirt hands
// it to QEMU as TZ, which reads the file of that name: here it must be a
// zone name this host's time zone database knows (time.LoadLocation).
func TimezoneError(tz string) string {
	const allowed = " (allowed: an IANA time zone name that /usr/share/zoneinfo has, such as America/New_York or UTC)"
	if len(tz) > 255 || !zonePattern.MatchString(tz) || tz == "Local" {
		return "is not a time zone name" + allowed
	}
	if _, err := time.LoadLocation(tz); err != nil {
		return "is not a time zone this host knows" + allowed
	}
	return ""
}

// checkDomain: disk serials (checkDisks), the clock's time zone, the
// kernel-boot paths (KubeVirt's ValidatePath) and the vCPU topology.
func checkDomain(c *causes, spec *v1.VirtualMachineInstanceSpec) {
	d := &spec.Domain
	if d.Clock != nil && d.Clock.Timezone != nil {
		if msg := TimezoneError(string(*d.Clock.Timezone)); msg != "" {
			c.value("spec.domain.clock.timezone", string(*d.Clock.Timezone), msg)
		}
	}
	if fw := d.Firmware; fw != nil && fw.KernelBoot != nil && fw.KernelBoot.Container != nil {
		kb, field := fw.KernelBoot.Container, "spec.domain.firmware.kernelBoot.container"
		if kb.KernelPath != "" {
			checkPath(c, field+".kernelPath", kb.KernelPath)
		}
		if kb.InitrdPath != "" {
			checkPath(c, field+".initrdPath", kb.InitrdPath)
		}
	}
	if _, err := Topology(d.CPU); err != nil {
		var tc *TopologyError
		if errors.As(err, &tc) {
			c.plain(tc.Field, tc.Msg)
		}
	}
}

// checkPath is KubeVirt's ValidatePath for a path inside an image.
func checkPath(c *causes, field, p string) {
	switch {
	case p == "/":
		c.value(field, p, field+" must not point to root")
	case filepath.Join("/", p) != strings.TrimSuffix(p, "/"):
		c.value(field, p, field+" must be an absolute path to a file without relative components")
	}
}

// checkCloudInit: inline cloud-init within KubeVirt's caps (the rule is
// pkg/cloudinit's, which the converter applies again).
func checkCloudInit(c *causes, v *v1.Volume, field string) {
	for _, fe := range cloudinit.SizeErrors(v, field) {
		c.plain(fe.Field, fe.Msg)
	}
}

// checkGate refuses a feature behind gate when the gate is off.
func checkGate(c *causes, field, gate string, gates []string) {
	if !slices.Contains(gates, gate) {
		c.plain(field, fmt.Sprintf("the %s feature gate is not enabled (--feature-gates %s)", gate, gate))
	}
}

// checkSidecars: hook sidecars only with the Sidecar gate.
func checkSidecars(c *causes, annotations map[string]string, gates []string) {
	if annotations[manifest.HookSidecarsAnnotation] != "" {
		checkGate(c, "metadata.annotations."+manifest.HookSidecarsAnnotation, launcherapi.GateSidecar, gates)
	}
}

// The launcher's vCPU limits: vCPUs enabled at start, and with maxSockets
// the most a domain has room for.
const (
	MaxVCPUs        = 64
	MaxHotplugVCPUs = 256
)

// VCPUs is a VMI's CPU topology with its counts.
type VCPUs struct {
	// Sockets, Cores and Threads are the topology, defaults applied (1).
	Sockets, Cores, Threads uint32
	// Enabled is Sockets × Cores × Threads, at most MaxVCPUs.
	Enabled uint32
	// Total is MaxSockets × Cores × Threads when maxSockets is above
	// sockets (at most MaxHotplugVCPUs), else Enabled.
	Total uint32
}

// TopologyError is a topology over the launcher's limits.
type TopologyError struct{ Field, Msg string }

// Error implements error.
func (e *TopologyError) Error() string { return "field " + e.Field + ": " + e.Msg }

// Topology counts a VMI's vCPUs without overflow (64-bit products, each
// checked) and refuses more than MaxVCPUs, or with maxSockets more than
// MaxHotplugVCPUs, with a *TopologyError.
func Topology(cpu *v1.CPU) (VCPUs, error) {
	t := VCPUs{Sockets: 1, Cores: 1, Threads: 1}
	maxSockets := uint32(0)
	if cpu != nil {
		t.Sockets, t.Cores, t.Threads = orOne(cpu.Sockets), orOne(cpu.Cores), orOne(cpu.Threads)
		maxSockets = cpu.MaxSockets
	}
	n, ok := product(t.Sockets, t.Cores, t.Threads)
	if !ok || n > MaxVCPUs {
		return t, &TopologyError{Field: "spec.domain.cpu", Msg: fmt.Sprintf("sockets %d × cores %d × threads %d is more than %d vCPUs (allowed: at most %d, the launcher's limit)", t.Sockets, t.Cores, t.Threads, MaxVCPUs, MaxVCPUs)}
	}
	t.Enabled, t.Total = uint32(n), uint32(n)
	if maxSockets != 0 && maxSockets < t.Sockets {
		return t, &TopologyError{Field: "spec.domain.cpu.maxSockets", Msg: fmt.Sprintf("%d is below spec.domain.cpu.sockets %d", maxSockets, t.Sockets)}
	}
	if maxSockets > t.Sockets {
		total, ok := product(maxSockets, t.Cores, t.Threads)
		if !ok || total > MaxHotplugVCPUs {
			return t, &TopologyError{Field: "spec.domain.cpu.maxSockets", Msg: fmt.Sprintf("maxSockets %d × cores %d × threads %d is more than %d vCPUs (allowed: at most %d)", maxSockets, t.Cores, t.Threads, MaxHotplugVCPUs, MaxHotplugVCPUs)}
		}
		t.Total = uint32(total)
	}
	return t, nil
}

func orOne(v uint32) uint32 {
	if v == 0 {
		return 1
	}
	return v
}

// product multiplies in 64 bits, each step checked; false on overflow.
func product(factors ...uint32) (uint64, bool) {
	p := uint64(1)
	for _, f := range factors {
		hi, lo := bits.Mul64(p, uint64(f))
		if hi != 0 {
			return 0, false
		}
		p = lo
	}
	return p, true
}
