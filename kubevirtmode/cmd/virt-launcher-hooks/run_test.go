package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// runHooks runs the built virt-launcher-hooks (VIRT_LAUNCHER_HOOKS, which
// `make unit` sets; KubeVirt's sidecar programs beside it) in direct mode
// on the test guest's kind of VMI with one ConfigMap sidecar.
func runHooks(t *testing.T, hookPath, script string) (string, string, int) {
	exe := os.Getenv("VIRT_LAUNCHER_HOOKS")
	if exe == "" {
		t.Skip("VIRT_LAUNCHER_HOOKS is not set: `make unit` builds virt-launcher-hooks and sets it")
	}
	if os.Geteuid() != 0 {
		t.Skip("the sidecars' mount namespaces need root")
	}
	sidecars := `[{"args": ["--version", "v1alpha3"], "configMap": {"name": "cm", "key": "s", "hookPath": "` + hookPath + `"}}]`
	req := map[string]any{
		"vmi": map[string]any{"metadata": map[string]any{"name": "v", "namespace": "default", "annotations": map[string]string{"hooks.kubevirt.io/hookSidecars": sidecars}},
			"spec": map[string]any{"domain": map[string]any{"devices": map[string]any{}}, "volumes": []any{
				map[string]any{"name": "ci", "cloudInitNoCloud": map[string]any{"userData": "#cloud-config\n"}}}}},
		"domain":     `<domain type="qemu"><name>default_v</name><on_crash>destroy</on_crash><sysinfo type="smbios"><baseBoard></baseBoard></sysinfo></domain>`,
		"configMaps": map[string]any{"cm": map[string]string{"s": script}},
	}
	stdin, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(exe, "--start", "--work-dir", t.TempDir())
	cmd.Stdin, cmd.Stdout, cmd.Stderr = bytes.NewReader(stdin), &stdout, &stderr
	err = cmd.Run()
	code := 0
	if exit, ok := err.(*exec.ExitError); ok {
		code = exit.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return stdout.String(), strings.TrimSpace(stderr.String()), code
}

// The scripts read their flags as sidecar-shim passes them.
const (
	readArgs     = "#!/bin/sh\nwhile [ $# -gt 0 ]; do case $1 in --domain) d=$2; shift;; --cloud-init) c=$2; shift;; esac; shift; done\n"
	boardScript  = readArgs + `printf '%s' "$d" | sed 's|<baseBoard></baseBoard>|<baseBoard><entry name="product">p</entry></baseBoard>|'` + "\n"
	ciPassScript = readArgs + `printf '%s' "$c"` + "\n"
	ciEditScript = readArgs + `printf '%s' "$c" | sed 's/cloud-config/cloud-config\\nhostname: x/'` + "\n"
)

func TestDirectModeRunsAConfigMapScript(t *testing.T) {
	out, stderr, code := runHooks(t, "/usr/bin/onDefineDomain", boardScript)
	if code != 0 || !strings.Contains(out, `<entry name="product">p</entry>`) || !strings.Contains(out, "<on_crash>destroy</on_crash>") {
		t.Fatalf("exit %d, stderr %q, out %s", code, stderr, out)
	}
}

func TestDirectModeTakesAPreCloudInitIsoHookThatChangesNothing(t *testing.T) {
	if _, stderr, code := runHooks(t, "/usr/bin/preCloudInitIso", ciPassScript); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
}

func TestDirectModeRefusesAPreCloudInitIsoHookThatChangesTheData(t *testing.T) {
	_, stderr, code := runHooks(t, "/usr/bin/preCloudInitIso", ciEditScript)
	if code != exitRefused || !strings.Contains(stderr, `a PreCloudInitIso hook changed the cloud-init data of volume "ci"`) {
		t.Fatalf("exit %d: %s", code, stderr)
	}
}

func TestDirectModeNamesASidecarThatFails(t *testing.T) {
	_, stderr, code := runHooks(t, "/usr/bin/onDefineDomain", "#!/bin/sh\necho broken >&2\nexit 3\n")
	if code != exitRefused || !strings.Contains(stderr, "hook sidecar OnDefineDomain") {
		t.Fatalf("exit %d: %s", code, stderr)
	}
}

// TestKubeVirtModeWaitsForThePodsSidecars: as in a launcher pod, the
// sidecar serves in its own /var/run/kubevirt-hooks (the emptyDir's
// sub-folder hook-sidecar-0) and virt-launcher-hooks --sidecars 1 sees the
// whole emptyDir there; here both are mount namespaces made by unshare(1).
// The sidecar is the pod's: it still serves after the hooks.
func TestKubeVirtModeWaitsForThePodsSidecars(t *testing.T) {
	exe := os.Getenv("VIRT_LAUNCHER_HOOKS")
	if exe == "" {
		t.Skip("VIRT_LAUNCHER_HOOKS is not set: `make unit` builds virt-launcher-hooks and sets it")
	}
	if os.Geteuid() != 0 {
		t.Skip("mount namespaces need root")
	}
	bin := filepath.Dir(exe)
	work := t.TempDir()
	vmi := `{"metadata": {"name": "v", "namespace": "default", "annotations": {"smbios.vm.kubevirt.io/baseBoardManufacturer": "pod"}}, "spec": {"domain": {"devices": {}}}}`
	req := `{"vmi": ` + vmi + `, "domain": "<domain type=\"qemu\"><name>default_v</name></domain>"}`
	if err := os.WriteFile(filepath.Join(work, "req.json"), []byte(req), 0o644); err != nil {
		t.Fatal(err)
	}
	script := `set -e
mount -t tmpfs tmpfs /run
mkdir -p /run/kubevirt-hooks/hook-sidecar-0 "$W/bin"
ln -s "$B/smbios-onDefineDomain" "$W/bin/onDefineDomain"
unshare -m sh -c 'mount --bind /run/kubevirt-hooks/hook-sidecar-0 /run/kubevirt-hooks && PATH="$W/bin:$PATH" exec "$B/sidecar-shim" --version v1alpha3' &
shim=$!
"$B/virt-launcher-hooks" --sidecars 1 --timeout 30s < "$W/req.json" || { kill $shim; exit 1; }
# The pod's sidecar lives on after the define (its Shutdown hook comes when
# the launch ends, from virt-launcher-monitor).
kill -0 $shim || { echo "the pod's sidecar ended with the define" >&2; exit 1; }
kill $shim
`
	cmd := exec.Command("unshare", "-m", "--propagation", "private", "sh", "-c", script)
	cmd.Env = append(os.Environ(), "W="+work, "B="+bin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%v: %s", err, stderr.String())
	}
	if !strings.Contains(stdout.String(), `<baseBoard><entry name="manufacturer">pod</entry></baseBoard>`) {
		t.Fatalf("out %s\nstderr %s", stdout.String(), stderr.String())
	}
}
