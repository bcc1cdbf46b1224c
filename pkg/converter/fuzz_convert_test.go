package converter_test

import (
	"context"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	v1 "kubevirt.io/api/core/v1"

	"github.com/crashloop-harness/crashloop/pkg/admission"
	"github.com/crashloop-harness/crashloop/pkg/containerdisk"
	"github.com/crashloop-harness/crashloop/pkg/converter"
	"github.com/crashloop-harness/crashloop/pkg/faults"
	"github.com/crashloop-harness/crashloop/pkg/kvdefaults"
	"github.com/crashloop-harness/crashloop/pkg/manifest"
	"github.com/crashloop-harness/crashloop/pkg/overlay"
)

// FuzzConvert takes manifest bytes through the stages the launcher runs
// before converting (launcherStages) and converts what they accept with
// DryRun, every folder a fresh one under one temporary tree, then checks
// what a hostile manifest must never get into the domain (convertEnv.check):
// a file outside the launcher's folders, an option smuggled into QEMU's
// command line, a disk target libvirt cannot name, a vCPU count that is not
// the topology's product. Refusals are fine; a panic is not.
//
// qemu-img and xorrisofs are stand-ins (fakeTools) that create the file the
// real tool would write and nothing else, so that an iteration costs a few
// milliseconds and still leaves on disk what the real one leaves.
func FuzzConvert(f *testing.F) {
	for _, s := range convertSeeds(f) {
		f.Add(s)
	}
	env := newConvertEnv(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		if problems, _ := env.run(t, data); len(problems) > 0 {
			t.Fatalf("%d properties broken for\n%s\n- %s", len(problems), data, strings.Join(problems, "\n- "))
		}
	})
}

// launcherStages is what pkg/launchprep's Prepare does to a manifest before
// converter.Convert, in its order: the one VM or VMI document out of the
// file (manifest.Split), decoded strictly (manifest.Read), the fields the
// converter does not read refused (converter.CheckSupported), KubeVirt's
// defaults (kvdefaults.Apply), KubeVirt's admission rules
// (admission.Admit, with the HostDisk and Sidecar gates on: seeds use
// hostDisk volumes, which check exempts when they name their file on
// purpose, and the hook sidecar example, whose hooks Convert does not run) and
// the fault annotations parsed (faults.Parse). An instancetype or
// preference is refused by Read here, as there is no virt-launcher-expand
// to expand it.
func launcherStages(data []byte) (*v1.VirtualMachineInstance, *manifest.Document, error) {
	l, err := manifest.Split(data, "fuzz")
	if err != nil {
		return nil, nil, err
	}
	vmi, doc, err := manifest.Read(l.Machine, "fuzz")
	if err != nil {
		return nil, nil, err
	}
	if err := converter.CheckSupported(doc.Raw); err != nil {
		return nil, nil, err
	}
	kvdefaults.Apply(vmi)
	if err := admission.Admit(admission.Input{VMI: vmi, DataVolumeTemplates: doc.DataVolumeTemplates, FeatureGates: []string{"HostDisk", "Sidecar"}}); err != nil {
		return nil, nil, err
	}
	if _, err := faults.Parse(vmi.Annotations, nil); err != nil {
		return nil, nil, err
	}
	return vmi, doc, nil
}

// consoleLogOf is the serial console's file as Prepare names it when no
// --console-log is given, with dir in place of launcherapi.DefaultConsoleDir.
func consoleLogOf(dir string, vmi *v1.VirtualMachineInstance) string {
	return filepath.Join(dir, fmt.Sprintf("%s_%s_%s.console.log", vmi.Namespace, vmi.Name, vmi.UID))
}

// moatDepth is how deep below the fuzz tree's root the launcher's folders
// are, so that a name climbing out of them with up to moatDepth ".." lands
// inside the tree, where check finds what it made.
const moatDepth = 8

// convertEnv is one fuzz worker's tree: the read-only folders (images,
// firmware, claims, virt-handler's container-disks folder) made once, and a
// fresh scratch folder per input under runs/.
type convertEnv struct {
	root    string // the whole tree, walked after every input
	base    string // the launcher's folders, moatDepth below root
	images  *converter.ImageStore
	ovmf    converter.OVMF
	ro      []string // folders the domain may read from, not write to
	console string
	before  map[string]bool // the tree's paths before any input
}

// newConvertEnv lays out the tree and puts the stand-in tools first on
// PATH.
func newConvertEnv(tb testing.TB) *convertEnv {
	tb.Helper()
	root := tb.TempDir()
	base := root
	for i := range moatDepth {
		base = filepath.Join(base, fmt.Sprintf("moat%d", i))
	}
	e := &convertEnv{root: root, base: base, console: filepath.Join(base, "console")}
	files := map[string]string{
		"images/" + converter.ImageIndexFile: `{"localhost/crashloop/test-guest:latest": "test-guest",
			"localhost/crashloop/cloud-guest:latest": "cloud-guest", "example.com/guest:1": "test-guest"}`,
		"images/test-guest/boot/vmlinuz":    "kernel",
		"images/test-guest/boot/initrd.img": "initrd",
		"images/test-guest/disk/disk.img":   "raw",
		"images/cloud-guest/disk/disk.img":  "QFI\xfb",
		"firmware/code.fd":                  "code",
		"firmware/vars.fd":                  "vars",
		"firmware/code.secboot.fd":          "code",
		"firmware/vars.ms.fd":               "vars",
		"claims/pvc1/disk.img":              "raw",
		"claims/dv1/disk.img":               "raw",
		// virt-handler's bind mounts: volume 0's disk and a kernel.
		"container-disks/disk_0.img":          "raw",
		"container-disks/kernel-boot/vmlinuz": "kernel",
	}
	for name, content := range files {
		p := filepath.Join(base, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			tb.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			tb.Fatal(err)
		}
	}
	for _, d := range []string{"console", "runs", "cache"} {
		if err := os.MkdirAll(filepath.Join(base, d), 0o755); err != nil {
			tb.Fatal(err)
		}
	}
	for _, d := range []string{"images", "firmware", "claims", "container-disks", "cache"} {
		e.ro = append(e.ro, filepath.Join(base, d))
	}
	fw := filepath.Join(base, "firmware")
	e.ovmf = converter.OVMF{Code: fw + "/code.fd", Vars: fw + "/vars.fd", SecureCode: fw + "/code.secboot.fd", SecureVars: fw + "/vars.ms.fd"}
	images, err := converter.OpenImageStore(filepath.Join(base, "images"))
	if err != nil {
		tb.Fatal(err)
	}
	// An image images.json does not list is looked up in a
	// containers-storage that does not exist: refused, nothing made.
	images.UseContainerDisks(containerdisk.Options{CacheDir: filepath.Join(base, "cache"),
		StorageRoot: filepath.Join(base, "no-storage"), StorageRunRoot: filepath.Join(base, "no-storage-run")})
	e.images = images
	tb.Setenv("PATH", fakeTools(tb)+string(os.PathListSeparator)+os.Getenv("PATH"))
	e.before = walk(tb, root)
	return e
}

// run takes one manifest through the stages and the conversion and returns
// the broken properties; converted tells whether the domain was made.
func (e *convertEnv) run(t testing.TB, data []byte) (problems []string, converted bool) {
	vmi, doc, err := launcherStages(data)
	if err != nil {
		return nil, false
	}
	// A safety guard, not a property: the converter makes files at paths
	// built from names, and this runs as root, so a name that climbs
	// further than the moat could write into the machine's own folders.
	// Shallower climbs show the same bugs.
	if js, _ := json.Marshal(vmi); strings.Count(string(js), "..") >= moatDepth {
		t.Skip("more '..' than the moat is deep")
	}
	run, err := os.MkdirTemp(filepath.Join(e.base, "runs"), "run-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(run)
	scratch := filepath.Join(run, "scratch")
	var pending []overlay.Pending
	opts := converter.DomainOptions{
		Accel: converter.AccelTCG, Images: e.images, ContainerDiskDir: filepath.Join(e.base, "container-disks"),
		ConsoleLog: consoleLogOf(e.console, vmi), ScratchDir: scratch, ClaimDir: filepath.Join(e.base, "claims"),
		OVMF: e.ovmf, DryRun: true, DataVolumeTemplates: doc.DataVolumeTemplates, Overlays: &pending,
	}
	conv, err := converter.Convert(context.Background(), vmi, opts)
	// As Prepare: the started qemu-img runs are waited for, also on error.
	_ = overlay.WaitAll(pending)
	if err == nil {
		problems = e.check(vmi, conv, opts)
	}
	problems = append(problems, e.leftovers(t, scratch)...)
	return problems, err == nil
}

// leftovers are the paths the conversion made in the tree outside the
// scratch folder, removed again so that the next input starts clean.
func (e *convertEnv) leftovers(t testing.TB, scratch string) []string {
	var out []string
	for p := range walk(t, e.root) {
		if !e.before[p] && p != filepath.Dir(scratch) && !inside(p, scratch) {
			out = append(out, fmt.Sprintf("made %s outside the scratch folder %s", p, scratch))
			os.RemoveAll(p)
		}
	}
	slices.Sort(out)
	return out
}

// walk lists every path under root.
func walk(tb testing.TB, root string) map[string]bool {
	paths := map[string]bool{}
	err := filepath.WalkDir(root, func(p string, _ fs.DirEntry, err error) error {
		if err != nil && !os.IsNotExist(err) {
			return err
		}
		paths[p] = true
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	return paths
}

// inside tells whether p, cleaned, is dir or below it.
func inside(p, dir string) bool {
	p = filepath.Clean(p)
	return p == dir || strings.HasPrefix(p, dir+string(filepath.Separator))
}

var (
	// A MAC address as QEMU's mac= takes it.
	macRE = regexp.MustCompile(`^([0-9a-fA-F]{2}:){5}[0-9a-fA-F]{2}$`)
	// An id, a netdev or a node name: letters, digits, '_', '.', '-'.
	idRE = regexp.MustCompile(`^[A-Za-z0-9_.-]+$`)
	// A port forward as forwardedNetdev writes it.
	hostfwdRE = regexp.MustCompile(`^(tcp|udp):127\.0\.0\.1:[0-9]+-:[0-9]+$`)
	// A disk target libvirt can name: vda..vdz, vdaa, ...
	targetRE = regexp.MustCompile(`^(vd|sd|hd)[a-z]+$`)
	// A disk serial as KubeVirt's admission takes it (libvirt refuses
	// ',' and QEMU splits on it).
	serialRE = regexp.MustCompile(`^[A-Za-z0-9_.+-]*$`)
)

// qemuOptions are the keys each QEMU command-line option of the domain may
// carry, with the rule for each value. The first element of a -netdev and
// a -device is its type (no '='), checked by qemuTypes.
func qemuOptions() map[string]map[string]func(string) bool {
	return map[string]map[string]func(string) bool{
		"-netdev": {
			"id":        idRE.MatchString,
			"hostfwd":   hostfwdRE.MatchString,
			"net":       fixed("10.0.2.0/24"),
			"host":      fixed("10.0.2.1"),
			"dhcpstart": fixed("10.0.2.2"),
			"ipv6-net":  fixed("fd10:0:2::/120"),
			"ipv6-host": fixed("fd10:0:2::1"),
		},
		"-device": {
			"netdev":  idRE.MatchString,
			"id":      idRE.MatchString,
			"romfile": fixed(""),
			"bus":     fixed("pci.0", "pcie.0"),
			"addr":    regexp.MustCompile(`^0x[0-9a-f]{1,2}$`).MatchString,
			"mac":     macRE.MatchString,
		},
		// None today: a -blockdev or -drive on the command line needs its
		// keys named here first.
		"-blockdev": {},
		"-drive":    {},
	}
}

// qemuTypes are the back ends and devices the domain's command line may name.
func qemuTypes() map[string][]string {
	return map[string][]string{
		"-netdev": {"user"},
		"-device": {"virtio-net-pci-non-transitional", "virtio-net-pci-transitional", "e1000", "e1000e", "rtl8139"},
	}
}

func fixed(values ...string) func(string) bool {
	return func(v string) bool { return slices.Contains(values, v) }
}

// qemuSplit splits a QEMU option value at its commas, ",," being a comma
// inside an element.
func qemuSplit(s string) []string {
	var out []string
	var cur strings.Builder
	for i := 0; i < len(s); i++ {
		switch {
		case s[i] == ',' && i+1 < len(s) && s[i+1] == ',':
			cur.WriteByte(',')
			i++
		case s[i] == ',':
			out = append(out, cur.String())
			cur.Reset()
		default:
			cur.WriteByte(s[i])
		}
	}
	return append(out, cur.String())
}

// check lists what the converted domain must not have.
func (e *convertEnv) check(vmi *v1.VirtualMachineInstance, conv *converter.Conversion, opts converter.DomainOptions) []string {
	var problems []string
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	dom := conv.Domain
	xmlText, err := dom.Marshal()
	if err != nil {
		return []string{fmt.Sprintf("the domain does not render: %v", err)}
	}
	// (a) Every file the domain names is in the launcher's folders.
	hostDisks := map[string]bool{}
	for _, v := range vmi.Spec.Volumes {
		if v.HostDisk != nil && filepath.IsAbs(v.HostDisk.Path) {
			// A hostDisk names its host file on purpose (KubeVirt's
			// HostDisk feature gate).
			hostDisks[filepath.Clean(v.HostDisk.Path)] = true
		}
	}
	allowed := append([]string{opts.ScratchDir, e.console}, e.ro...)
	for _, p := range domainPaths(xmlText) {
		if hostDisks[filepath.Clean(p)] {
			continue
		}
		if !filepath.IsAbs(p) || !slices.ContainsFunc(allowed, func(dir string) bool { return inside(p, dir) }) {
			bad("file %q is outside the launcher's folders", p)
		}
	}
	// (b) QEMU's command line carries only known keys with checked values.
	if cl := dom.QEMUCommandline; cl != nil {
		args, options, types := cl.Args, qemuOptions(), qemuTypes()
		for i := 0; i < len(args); i += 2 {
			opt := args[i].Value
			keys, ok := options[opt]
			if !ok || i+1 >= len(args) {
				bad("QEMU command line: unexpected argument %q", opt)
				continue
			}
			elems := qemuSplit(args[i+1].Value)
			if allowed, typed := types[opt]; typed {
				if !slices.Contains(allowed, elems[0]) {
					bad("QEMU %s %q: type %q", opt, args[i+1].Value, elems[0])
				}
				elems = elems[1:]
			}
			for _, el := range elems {
				k, v, _ := strings.Cut(el, "=")
				if check, ok := keys[k]; !ok || !check(v) {
					bad("QEMU %s %q: element %q", opt, args[i+1].Value, el)
				}
			}
		}
	}
	// (c) Disk targets libvirt can name, and serials QEMU does not split.
	for _, d := range dom.Devices.Disks {
		if d.Target == nil || !targetRE.MatchString(d.Target.Dev) {
			bad("disk target %+v is not vd/sd/hd and letters", d.Target)
		}
		if !serialRE.MatchString(d.Serial) {
			bad("disk serial %q", d.Serial)
		}
	}
	// (d) The vCPU count is the topology's product, from 1 to 256.
	if dom.VCPU == nil || dom.CPU == nil || dom.CPU.Topology == nil {
		bad("no vCPU count or topology")
	} else {
		tp := dom.CPU.Topology
		n := int64(tp.Sockets) * int64(tp.Cores) * int64(tp.Threads)
		if int64(dom.VCPU.Value) != n || n < 1 || n > 256 {
			bad("%d vCPUs for %d sockets x %d cores x %d threads", dom.VCPU.Value, tp.Sockets, tp.Cores, tp.Threads)
		}
	}
	return problems
}

// domainPaths are the files a domain's XML names: the text of the elements
// that hold a file name, and the attributes that do.
func domainPaths(domainXML string) []string {
	pathElements := []string{"kernel", "initrd", "loader", "nvram", "dtb"}
	pathAttrs := []string{"file", "path", "socket", "dir"}
	var paths []string
	d := xml.NewDecoder(strings.NewReader(domainXML))
	var open []string
	for {
		tok, err := d.Token()
		if err == io.EOF || err != nil {
			return paths
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			open = append(open, tok.Name.Local)
			for _, a := range tok.Attr {
				if slices.Contains(pathAttrs, a.Name.Local) && a.Value != "" {
					paths = append(paths, a.Value)
				}
			}
		case xml.EndElement:
			open = open[:len(open)-1]
		case xml.CharData:
			if n := len(open); n > 0 && slices.Contains(pathElements, open[n-1]) && strings.TrimSpace(string(tok)) != "" {
				paths = append(paths, strings.TrimSpace(string(tok)))
			}
		}
	}
}

// fakeToolsScript stands in for qemu-img (create) and xorrisofs: it makes
// the file the real tool would write, empty, and for xorrisofs writes into
// it what it would have packed (one "path<TAB>size<TAB>type" line per
// entry of the staging folder), so a test can read it back.
const fakeToolsScript = `#!/bin/sh
out=
case "${0##*/}" in
xorrisofs)
	for a in "$@"; do
		if [ "$prev" = -output ]; then out=$a; fi
		prev=$a; stage=$a
	done
	[ -n "$out" ] && exec find "$stage" -mindepth 1 -printf '%P\t%s\t%y\n' > "$out" ;;
qemu-img)
	[ "$1" = create ] || exit 1
	shift
	while [ $# -gt 0 ]; do
		case "$1" in
		-f|-F|-b|-o) shift 2 ;;
		-*) shift ;;
		*) [ -z "$out" ] && out=$1; shift ;;
		esac
	done
	[ -n "$out" ] && : > "$out" ;;
esac
`

// fakeTools writes the stand-in tools into a folder of their own.
func fakeTools(tb testing.TB) string {
	dir := tb.TempDir()
	for _, name := range []string{"qemu-img", "xorrisofs"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(fakeToolsScript), 0o755); err != nil {
			tb.Fatal(err)
		}
	}
	return dir
}
