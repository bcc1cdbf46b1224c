// Command virt-launcher-hooks applies KubeVirt v1.6.0's hook sidecars
// (hooks.kubevirt.io/hookSidecars) to a domain the launcher's converter
// rendered, with KubeVirt's own hook manager (package hooksidecar): it
// reads {"vmi": VMI, "domain": XML, "configMaps": {name: {key: value}}}
// as JSON on stdin and writes the domain XML the last OnDefineDomain hook
// returned on stdout.
//
// With --start (the launcher's direct mode) it starts the sidecars the
// VMI's annotation names itself, KubeVirt's own programs installed beside
// it, each in a mount namespace of its own, waits for their sockets, runs
// the hooks and stops the sidecars by PID before it exits. With
// --sidecars N (KubeVirt mode, inside a launcher pod whose sidecar
// containers already run) it waits for N sockets in
// /var/run/kubevirt-hooks, as virt-launcher does. --check only reads the
// annotation (the dry run).
//
// The converter stage (pkg/launchprep) execs it through pkg/hooksexec; it
// is a program of its own because kubevirt.io/kubevirt's pins do not fit
// the main module.
//
// Exit status: 0 rewritten; 1 refused (the annotation, a sidecar, a
// hook): one line on stderr says why; 2 bad input or usage.
//
//	virt-launcher-hooks --start --work-dir DIR < request.json
//	virt-launcher-hooks --sidecars N < request.json
package main

import (
	"encoding/json"
	"encoding/xml"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	v1 "kubevirt.io/api/core/v1"

	"kubevirt.io/kubevirt/pkg/virt-launcher/virtwrap/api"

	"github.com/crashloop-harness/crashloop/kubevirtmode/hooksidecar"
	"github.com/crashloop-harness/crashloop/pkg/xmltree"
)

const (
	exitRefused  = 1
	exitBadInput = 2
	programName  = "virt-launcher-hooks"
)

// request is stdin.
type request struct {
	VMI        *v1.VirtualMachineInstance `json:"vmi"`
	Domain     string                     `json:"domain"`
	ConfigMaps hooksidecar.ConfigMaps     `json:"configMaps"`
}

type options struct {
	start, check bool
	sidecars     uint
	workDir      string
	timeout      time.Duration
}

func main() {
	hooksidecar.Init()
	var o options
	fs := flag.NewFlagSet(programName, flag.ContinueOnError)
	fs.BoolVar(&o.start, "start", false, "start the sidecars the VMI's annotation names (direct mode)")
	fs.BoolVar(&o.check, "check", false, "only read the annotation: its sidecars, images and ConfigMaps (dry run)")
	fs.UintVar(&o.sidecars, "sidecars", 0, "wait for N sidecars already serving in /var/run/kubevirt-hooks (KubeVirt mode)")
	fs.StringVar(&o.workDir, "work-dir", "", "folder for the sidecars' sockets and scripts (with --start)")
	fs.DurationVar(&o.timeout, "timeout", time.Minute, "how long the sidecars have to serve their sockets")
	if err := fs.Parse(os.Args[1:]); err != nil {
		os.Exit(exitBadInput)
	}
	if err := o.validate(fs.NArg()); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", programName, err)
		os.Exit(exitBadInput)
	}
	if o.start && !o.check {
		hooksidecar.Isolate()
	}
	req, err := read(os.Stdin)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: reading stdin: %v\n", programName, err)
		os.Exit(exitBadInput)
	}
	out, err := run(o, req)
	if err != nil {
		fmt.Fprintln(os.Stderr, oneLine(err.Error()))
		os.Exit(exitRefused)
	}
	if _, err := io.WriteString(os.Stdout, out); err != nil {
		os.Exit(exitBadInput)
	}
}

func (o options) validate(args int) error {
	switch {
	case args != 0:
		return errors.New("takes flags only; the request is on stdin")
	case o.start == (o.sidecars > 0) && !o.check:
		return errors.New("want either --start (direct mode) or --sidecars N (KubeVirt mode)")
	case o.start && !o.check && o.workDir == "":
		return errors.New("--start needs --work-dir")
	case o.timeout <= 0:
		return fmt.Errorf("--timeout %v: want a positive duration", o.timeout)
	}
	return nil
}

func read(r io.Reader) (*request, error) {
	var req request
	d := json.NewDecoder(r)
	d.DisallowUnknownFields()
	if err := d.Decode(&req); err != nil {
		return nil, err
	}
	if req.VMI == nil || req.Domain == "" {
		return nil, errors.New(`want {"vmi": ..., "domain": "..."}`)
	}
	return &req, nil
}

// run rewrites the request's domain; it returns it unchanged when the VMI
// names no sidecar.
func run(o options, req *request) (string, error) {
	var specs []hooksidecar.Spec
	if o.start || o.check {
		self, err := os.Executable()
		if err != nil {
			return "", err
		}
		if specs, err = hooksidecar.Resolve(req.VMI, filepath.Dir(self), req.ConfigMaps); err != nil {
			return "", err
		}
	}
	if o.check {
		return "", nil
	}
	if o.start && len(specs) == 0 {
		return req.Domain, nil
	}
	domain, own, err := kubevirtDomain(req.Domain)
	if err != nil {
		return "", err
	}
	var out string
	if o.start {
		out, err = startAndApply(o, specs, domain, req.VMI)
	} else {
		out, err = hooksidecar.OnDefineDomain(hooksidecar.Wait{N: o.sidecars, Timeout: o.timeout, CloudInitWritten: true}, domain, req.VMI)
	}
	if err != nil {
		return "", err
	}
	return own.restore(out)
}

// startAndApply starts the sidecars, applies their hooks and stops them.
func startAndApply(o options, specs []hooksidecar.Spec, domain *api.DomainSpec, vmi *v1.VirtualMachineInstance) (string, error) {
	sockets := filepath.Join(o.workDir, "sockets")
	if err := os.MkdirAll(sockets, 0o755); err != nil {
		return "", err
	}
	if err := hooksidecar.UseSocketsDir(sockets); err != nil {
		return "", err
	}
	sc, err := hooksidecar.Start(specs, sockets, o.workDir)
	if err != nil {
		return "", err
	}
	defer sc.Stop()
	if err := sc.Ready(o.timeout); err != nil {
		return "", err
	}
	return hooksidecar.OnDefineDomain(hooksidecar.Wait{N: uint(len(specs)), Timeout: o.timeout, Exited: sc.Exited, Shutdown: true, CloudInitWritten: true}, domain, vmi)
}

// launcherOwn is what the launcher's domain holds that KubeVirt's domain
// type cannot carry (the crash-loop harness's own elements, such as
// on_crash and the panic device's address): the hooks get the domain
// without it, and it is put back into what they return.
type launcherOwn struct {
	before *xmltree.Node
	lost   []string
}

// kubevirtDomain reads the launcher's domain into KubeVirt's domain type,
// which is what its hook manager hands the sidecars, and notes what that
// type loses.
func kubevirtDomain(doc string) (*api.DomainSpec, *launcherOwn, error) {
	spec := &api.DomainSpec{}
	if err := xml.Unmarshal([]byte(doc), spec); err != nil {
		return nil, nil, fmt.Errorf("reading the domain into KubeVirt's domain type: %w", err)
	}
	again, err := xml.Marshal(spec)
	if err != nil {
		return nil, nil, err
	}
	before, err := xmltree.Parse(doc)
	if err != nil {
		return nil, nil, err
	}
	after, err := xmltree.Parse(string(again))
	if err != nil {
		return nil, nil, err
	}
	own := &launcherOwn{before: before}
	// KubeVirt's type also writes some empty elements (an interface's
	// <source/>) that libvirt reads as absent: those are no loss.
	for _, d := range xmltree.Compare(before, after) {
		if d.KubeVirt != "" {
			own.lost = append(own.lost, d.Path)
		}
	}
	return spec, own, nil
}

// restore puts what KubeVirt's type lost back into the hooks' domain,
// where the hooks kept its parent element.
func (o *launcherOwn) restore(out string) (string, error) {
	if len(o.lost) == 0 {
		return out, nil
	}
	tree, err := xmltree.Parse(out)
	if err != nil {
		return "", fmt.Errorf("reading the domain the hook sidecars returned: %w", err)
	}
	for _, p := range o.lost {
		xmltree.Graft(tree, o.before, p)
	}
	return tree.XML(), nil
}

// oneLine keeps an error to one line.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
