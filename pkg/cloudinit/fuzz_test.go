package cloudinit

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "kubevirt.io/api/core/v1"
)

// The bounds FuzzCloudInit holds accepted data to. KubeVirt caps inline
// userData and networkData at 2048 bytes each (virt-api's
// cloudInitUserMaxLen, cloudInitNetworkMaxLen); the property allows far
// more, so it says "bounded" without fixing which cap a fix picks.
const (
	maxInlineData = 64 << 10
	maxMetaData   = 4 << 10
	maxFieldError = 1 << 10
	// maxPayload keeps an iteration cheap: the repeated data stops
	// growing there, well past maxInlineData.
	maxPayload = 1 << 20
)

// FuzzCloudInit builds a cloud-init volume of either source from fuzzed
// user, network and (through the VMI's name and host name) meta data,
// inline or base64, a short input repeated 2^scale times up to a megabyte
// (so that one mutation makes a short input large), and writes its
// ISO into a folder of a temporary tree. Properties: no panic; a refusal is
// a short *FieldError; accepted data is bounded (maxInlineData,
// maxMetaData), its metadata is JSON, its files have local names; WriteISO
// stages exactly those files and leaves nothing in the tree but the ISO.
//
// xorrisofs is a stand-in that writes, in place of the ISO, the list of
// what it was given to pack (TestISO runs the real one).
func FuzzCloudInit(f *testing.F) {
	f.Add("#cloud-config\npassword: x\n", "version: 2\n", false, false, uint8(0), "vm1", "")
	f.Add("#!/bin/sh\necho hi\n", "", true, true, uint8(3), "vm1", "host")
	f.Add("", "network:\n  version: 1\n", false, true, uint8(1), "a.b-c", strings.Repeat("h", 70))
	f.Add("x", "", false, false, uint8(11), "vm1", "")
	root := f.TempDir()
	out := filepath.Join(root, "moat", "out")
	if err := os.MkdirAll(out, 0o755); err != nil {
		f.Fatal(err)
	}
	f.Setenv("PATH", fakeXorrisofs(f)+string(os.PathListSeparator)+os.Getenv("PATH"))
	f.Fuzz(func(t *testing.T, user, network string, b64, configDrive bool, scale uint8, name, hostname string) {
		if len(name) > 253 || name == "" {
			t.Skip("a Kubernetes name is 1 to 253 bytes (manifest and admission refuse others)")
		}
		user, network = grow(user, scale), grow(network, scale)
		vmi, v := cloudInitVMI(user, network, b64, configDrive, name, hostname)
		for _, p := range checkCloudInit(t, vmi, v, out) {
			t.Error(p)
		}
	})
}

// grow repeats s 2^(scale%21) times, up to about maxPayload bytes.
func grow(s string, scale uint8) string {
	if s == "" {
		return s
	}
	return strings.Repeat(s, min(1<<(scale%21), maxPayload/len(s)+1))
}

// cloudInitVMI is a VMI named name with one cloud-init volume.
func cloudInitVMI(user, network string, b64, configDrive bool, name, hostname string) (*v1.VirtualMachineInstance, *v1.Volume) {
	vmi := testVMI()
	vmi.Name, vmi.Spec.Hostname = name, hostname
	var src v1.CloudInitNoCloudSource
	if b64 {
		src.UserDataBase64 = base64.StdEncoding.EncodeToString([]byte(user))
		src.NetworkDataBase64 = base64.StdEncoding.EncodeToString([]byte(network))
	} else {
		src.UserData, src.NetworkData = user, network
	}
	v := &v1.Volume{Name: "cloudinit"}
	if configDrive {
		v.CloudInitConfigDrive = &v1.CloudInitConfigDriveSource{UserData: src.UserData, UserDataBase64: src.UserDataBase64,
			NetworkData: src.NetworkData, NetworkDataBase64: src.NetworkDataBase64}
	} else {
		v.CloudInitNoCloud = &src
	}
	return vmi, v
}

// checkCloudInit reads the volume and writes its ISO into out, and returns
// the broken properties.
func checkCloudInit(t testing.TB, vmi *v1.VirtualMachineInstance, v *v1.Volume, out string) []string {
	var problems []string
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	d, err := FromVolume(vmi, v, "spec.volumes[0]")
	if err != nil {
		var fe *FieldError
		if !errors.As(err, &fe) {
			bad("refused with %T, not a *FieldError: %.200v", err, err)
		}
		if len(err.Error()) > maxFieldError {
			bad("refusal of %d bytes: %.200s…", len(err.Error()), err)
		}
		return problems
	}
	if len(d.UserData) > maxInlineData || len(d.NetworkData) > maxInlineData {
		bad("accepted %d bytes of user data and %d of network data (bound %d each)", len(d.UserData), len(d.NetworkData), maxInlineData)
	}
	if len(d.MetaData) > maxMetaData || !json.Valid(d.MetaData) {
		bad("metadata of %d bytes, JSON %v: %.200s", len(d.MetaData), json.Valid(d.MetaData), d.MetaData)
	}
	files := d.Files()
	for name := range files {
		if !filepath.IsLocal(name) {
			bad("file name %q is not local to the disk", name)
		}
	}
	if len(problems) > 0 {
		return problems
	}
	before := listTree(t, filepath.Dir(out))
	iso := filepath.Join(out, "cloudinit.iso")
	defer os.Remove(iso)
	if got, err := d.WriteISO(context.Background(), out, filepath.Base(iso)); err != nil {
		return append(problems, fmt.Sprintf("WriteISO: %v", err))
	} else if got != iso {
		bad("WriteISO wrote %s, want %s", got, iso)
	}
	for p := range listTree(t, filepath.Dir(out)) {
		if !before[p] && p != iso {
			bad("WriteISO left %s", p)
		}
	}
	staged, err := os.ReadFile(iso)
	if err != nil {
		return append(problems, err.Error())
	}
	want := map[string]bool{}
	for name, data := range files {
		want[fmt.Sprintf("%s\t%d\tf", name, len(data))] = true
		for dir := filepath.Dir(name); dir != "."; dir = filepath.Dir(dir) {
			want[dir+"\t"] = true
		}
	}
	for _, line := range strings.Split(strings.TrimSpace(string(staged)), "\n") {
		name, rest, _ := strings.Cut(line, "\t")
		size, kind, _ := strings.Cut(rest, "\t")
		switch {
		case kind == "d" && want[name+"\t"]:
		case kind == "f" && want[line]:
			delete(want, line)
		default:
			bad("xorrisofs was given %q (%s bytes, type %s), not one of the volume's files", name, size, kind)
		}
	}
	for w := range want {
		if n, size, ok := strings.Cut(w, "\t"); ok && strings.HasSuffix(size, "\tf") {
			bad("xorrisofs was not given %s (%s)", n, strings.TrimSuffix(size, "\tf"))
		}
	}
	return problems
}

// listTree lists every path under root.
func listTree(tb testing.TB, root string) map[string]bool {
	paths := map[string]bool{}
	if err := filepath.WalkDir(root, func(p string, _ fs.DirEntry, err error) error {
		paths[p] = true
		return err
	}); err != nil {
		tb.Fatal(err)
	}
	return paths
}

// fakeXorrisofsScript stands in for xorrisofs: in place of the ISO it
// writes one "path<TAB>size<TAB>type" line per entry of the folder it was
// given to pack (its last argument).
const fakeXorrisofsScript = `#!/bin/sh
for a in "$@"; do
	if [ "$prev" = -output ]; then out=$a; fi
	prev=$a; stage=$a
done
exec find "$stage" -mindepth 1 -printf '%P\t%s\t%y\n' > "$out"
`

// fakeXorrisofs writes the stand-in into a folder of its own.
func fakeXorrisofs(tb testing.TB) string {
	dir := tb.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "xorrisofs"), []byte(fakeXorrisofsScript), 0o755); err != nil {
		tb.Fatal(err)
	}
	return dir
}

// TestHostileCloudInit runs the minimized inputs of the cloud-init class
// through FuzzCloudInit's properties: each must be refused or keep every
// property; before KubeVirt's 2048-byte cap, 50 MB of inline data was
// accepted.
func TestHostileCloudInit(t *testing.T) {
	big := strings.Repeat("#", 50<<20)
	for _, c := range []struct {
		name                string
		user, network       string
		b64, configDrive    bool
		vmiName, vmHostname string
	}{
		{name: "50 MB of inline userData", user: big, vmiName: "vm1"},
		{name: "50 MB of networkData in base64, ConfigDrive", user: "x", network: big, b64: true, configDrive: true, vmiName: "vm1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("PATH", fakeXorrisofs(t)+string(os.PathListSeparator)+os.Getenv("PATH"))
			out := filepath.Join(t.TempDir(), "moat", "out")
			if err := os.MkdirAll(out, 0o755); err != nil {
				t.Fatal(err)
			}
			vmi, v := cloudInitVMI(c.user, c.network, c.b64, c.configDrive, c.vmiName, c.vmHostname)
			problems := checkCloudInit(t, vmi, v, out)
			if len(problems) > 0 {
				t.Errorf("broken properties:\n- %s", strings.Join(problems, "\n- "))
			}
		})
	}
}
