package watchdog

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRunDoneLeavesState(t *testing.T) {
	root := filepath.Join(t.TempDir(), "vmi-1")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	forgot := false
	forget := func(string, string) error { forgot = true; return nil }
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if code := Run(strings.NewReader("done\n"), []string{"ns_vmi", root, "qemu:///x"}, forget, log); code != 0 {
		t.Fatalf("exit code %d, want 0", code)
	}
	if _, err := os.Stat(root); err != nil || forgot {
		t.Fatalf("after done: root stat err %v, forgot %v; want the root kept and nothing forgotten", err, forgot)
	}
}

func TestRunEOFReaps(t *testing.T) {
	root := filepath.Join(t.TempDir(), "vmi-1")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	var forgot []string
	forget := func(uri, dom string) error { forgot = append(forgot, uri, dom); return nil }
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if code := Run(strings.NewReader(""), []string{"ns_vmi-none", root, "qemu:///x"}, forget, log); code != 0 {
		t.Fatalf("exit code %d, want 0", code)
	}
	if _, err := os.Stat(root); !os.IsNotExist(err) {
		t.Errorf("root still there after the launcher died (stat: %v)", err)
	}
	if strings.Join(forgot, " ") != "qemu:///x ns_vmi-none" {
		t.Errorf("forget called with %q, want the URI and the domain", forgot)
	}
}

func TestRunWantsThreeArguments(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if code := Run(strings.NewReader(""), []string{"only-one"}, nil, log); code != 3 {
		t.Errorf("exit code %d, want 3 (usage)", code)
	}
}

func TestReferencesRoot(t *testing.T) {
	probe := []string{"/usr/bin/qemu-system-x86_64", "-S", "-machine", "none,accel=tcg",
		"-qmp", "unix:/run/crashloop/vmi-123/lib/qemu/qmp-Q1/qmp.monitor,server=on,wait=off",
		"-pidfile", "/run/crashloop/vmi-123/lib/qemu/qmp-Q1/qmp.pid", "-daemonize"}
	for _, tc := range []struct {
		args []string
		root string
		want bool
	}{
		{probe, "/run/crashloop/vmi-123", true},
		{probe, "/run/crashloop/vmi-123/", true},
		{probe, "/run/crashloop/vmi-12", false},
		{probe, "/run/crashloop/vmi-1234", false},
		{append([]string{"/bin/sleep"}, probe[1:]...), "/run/crashloop/vmi-123", false},
		{nil, "/run/crashloop/vmi-123", false},
	} {
		if got := referencesRoot(tc.args, tc.root); got != tc.want {
			t.Errorf("referencesRoot(%q, %q) = %v, want %v", tc.args[:min(1, len(tc.args))], tc.root, got, tc.want)
		}
	}
}

// TestSwtpmUnder: the swtpm that libvirt starts for a vTPM is matched by
// the per-VMI root its socket and state are in, never a neighbour's.
func TestSwtpmUnder(t *testing.T) {
	swtpm := []string{"/usr/bin/swtpm", "socket", "--ctrl", "type=unixio,path=/run/crashloop/vmi-123/run/swtpm/1-ns_vmi-swtpm.sock,mode=0600",
		"--tpmstate", "dir=/run/crashloop/vmi-123/lib/swtpm/f891/tpm2,mode=0600", "--terminate", "--tpm2"}
	for _, tc := range []struct {
		args []string
		root string
		want bool
	}{
		{swtpm, "/run/crashloop/vmi-123", true},
		{swtpm, "/run/crashloop/vmi-12", false},
		{append([]string{"/usr/bin/swtpm_setup"}, swtpm[1:]...), "/run/crashloop/vmi-123", false},
		{nil, "/run/crashloop/vmi-123", false},
	} {
		if got := swtpmUnder(tc.args, tc.root); got != tc.want {
			t.Errorf("swtpmUnder(%q, %q) = %v, want %v", tc.args[:min(1, len(tc.args))], tc.root, got, tc.want)
		}
	}
}
