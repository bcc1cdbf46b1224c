package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"time"

	"github.com/crashloop-harness/crashloop/pkg/kvdefaults"
)

// cpuQOMPath is the first vCPU of a q35 machine started with -S, where
// libvirt 9.0 reads the guest CPU.
const cpuQOMPath = "/machine/unattached/device[0]"

// qmpSession is a QMP connection over a QEMU's stdio.
type qmpSession struct {
	in    io.Writer
	lines *bufio.Scanner
}

// call sends one command and returns its "return" value, skipping events.
func (s qmpSession) call(cmd string, args map[string]any) (json.RawMessage, error) {
	msg := map[string]any{"execute": cmd}
	if args != nil {
		msg["arguments"] = args
	}
	req, err := json.Marshal(msg)
	if err != nil {
		return nil, err
	}
	if _, err := s.in.Write(append(req, '\n')); err != nil {
		return nil, fmt.Errorf("sending %s: %w", cmd, err)
	}
	for s.lines.Scan() {
		var resp struct {
			Return json.RawMessage `json:"return"`
			Error  *struct {
				Desc string `json:"desc"`
			} `json:"error"`
			Event string `json:"event"`
		}
		if err := json.Unmarshal(s.lines.Bytes(), &resp); err != nil {
			return nil, fmt.Errorf("%s: reading the reply %q: %w", cmd, s.lines.Text(), err)
		}
		switch {
		case resp.Event != "":
			continue
		case resp.Error != nil:
			return nil, fmt.Errorf("%s: %s", cmd, resp.Error.Desc)
		default:
			return resp.Return, nil
		}
	}
	return nil, fmt.Errorf("%s: QEMU closed QMP: %v", cmd, s.lines.Err())
}

// cpuRead times, on a bare QEMU started as the launcher's domain starts it
// (q35, TCG, QEMU's default CPU model, vCPUs stopped), the guest-CPU read
// that libvirt 9.0 makes before it calls a domain running: qom-list of the
// first vCPU, one qom-get per boolean property, then unavailable-features.
// It returns the time of that sequence and how many qom-get it took.
func (b *bench) cpuRead() (time.Duration, int, error) {
	cmd := exec.Command(b.qemuBin, "-S", "-nodefaults", "-display", "none", "-no-user-config",
		"-accel", "tcg", "-machine", kvdefaults.MachineType, "-m", "256", "-qmp", "stdio")
	in, err := cmd.StdinPipe()
	if err != nil {
		return 0, 0, err
	}
	lines, _, stop, err := startQEMU(cmd)
	if err != nil {
		return 0, 0, err
	}
	defer stop()
	lines.Buffer(make([]byte, 1<<20), 1<<20)
	if !lines.Scan() || !strings.Contains(lines.Text(), `"QMP"`) {
		return 0, 0, fmt.Errorf("no QMP greeting: %q", lines.Text())
	}
	s := qmpSession{in: in, lines: lines}
	if _, err := s.call("qmp_capabilities", nil); err != nil {
		return 0, 0, err
	}
	start := time.Now()
	raw, err := s.call("qom-list", map[string]any{"path": cpuQOMPath})
	if err != nil {
		return 0, 0, err
	}
	var props []struct{ Name, Type string }
	if err := json.Unmarshal(raw, &props); err != nil {
		return 0, 0, fmt.Errorf("qom-list of %s: %w", cpuQOMPath, err)
	}
	gets := 0
	for _, p := range props {
		if p.Type != "bool" {
			continue
		}
		if _, err := s.call("qom-get", map[string]any{"path": cpuQOMPath, "property": p.Name}); err != nil {
			return 0, 0, err
		}
		gets++
	}
	if _, err := s.call("qom-get", map[string]any{"path": cpuQOMPath, "property": "unavailable-features"}); err != nil {
		return 0, 0, err
	}
	d := time.Since(start)
	_, _ = s.call("quit", nil)
	return d, gets + 1, nil
}
