package containerdisk

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	cdt "github.com/crashloop-harness/crashloop/pkg/containerdisk/containerdisktest"
)

func newResolver(t testing.TB) (*Resolver, string) {
	t.Helper()
	cache := filepath.Join(t.TempDir(), "containerdisks")
	return New(Options{CacheDir: cache, StorageRoot: filepath.Join(t.TempDir(), "no-storage")}), cache
}

// TestTransports resolves the same disk from an OCI layout (with and
// without a tag), an oci-archive and a docker-archive: the file's sha256
// matches, and the second resolution is served from the cache.
func TestTransports(t *testing.T) {
	disk := cdt.FakeQcow2(3<<20+123, 1)
	img := cdt.Image{Gzip: true, Layers: [][]byte{cdt.Layer(t, cdt.Dir("disk/"), cdt.File("disk/disk.qcow2", disk))}}
	dir := t.TempDir()
	img.OCILayout(t, filepath.Join(dir, "layout"), "v1")
	img.OCIArchive(t, filepath.Join(dir, "disk.oci.tar"))
	img.DockerArchive(t, filepath.Join(dir, "disk.docker.tar"), "crashloop.test/disk:v1")
	ctx := context.Background()
	for _, ref := range []string{
		"oci:" + filepath.Join(dir, "layout") + ":v1",
		"oci:" + filepath.Join(dir, "layout"),
		"oci-archive:" + filepath.Join(dir, "disk.oci.tar"),
		"docker-archive:" + filepath.Join(dir, "disk.docker.tar"),
	} {
		t.Run(strings.SplitN(ref, ":", 2)[0], func(t *testing.T) {
			r, cache := newResolver(t)
			first, err := r.File(ctx, ref, "")
			if err != nil {
				t.Fatalf("File(%s): %v", ref, err)
			}
			if first.Cached || first.InImage != "/disk/disk.qcow2" || !strings.HasPrefix(first.Path, cache+"/") {
				t.Fatalf("first resolution: %+v", first)
			}
			if got, want := cdt.SHA256File(t, first.Path), cdt.SHA256(disk); got != want {
				t.Fatalf("extracted sha256 %s, want %s", got, want)
			}
			fi, _ := os.Stat(first.Path)
			if fi.Mode().Perm() != 0o444 {
				t.Errorf("extracted file mode %v, want read-only", fi.Mode())
			}
			second, err := r.File(ctx, ref, "")
			if err != nil {
				t.Fatalf("second File(%s): %v", ref, err)
			}
			if !second.Cached || second.Path != first.Path || second.Digest != first.Digest {
				t.Fatalf("second resolution not from the cache: %+v (first %+v)", second, first)
			}
			fi2, _ := os.Stat(second.Path)
			if !os.SameFile(fi, fi2) || !fi2.ModTime().Equal(fi.ModTime()) {
				t.Fatalf("the cached file was rewritten")
			}
			cdt.NoLeftovers(t, cache)
			t.Logf("%s: first %v (extracted), repeat %v (cached), digest %s", ref, first.Duration, second.Duration, first.Digest)
		})
	}
}

// TestRelativePath resolves a relative archive path against BaseDir (the
// image folder of images.json).
func TestRelativePath(t *testing.T) {
	base := t.TempDir()
	img := cdt.Image{Layers: [][]byte{cdt.Layer(t, cdt.File("disk/d.img", []byte("raw disk")))}}
	img.OCIArchive(t, filepath.Join(base, "guest.tar"))
	r := New(Options{CacheDir: t.TempDir(), BaseDir: base})
	res, err := r.File(context.Background(), "oci-archive:guest.tar", "")
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(res.Path); string(b) != "raw disk" || res.InImage != "/disk/d.img" {
		t.Fatalf("got %+v: %q", res, b)
	}
}

// TestLayers applies layers in order, with the OCI whiteouts.
func TestLayers(t *testing.T) {
	top := []byte("QFI\xfbtop")
	tests := []struct {
		name    string
		Layers  [][]byte
		inImage string
		want    string // in-image path of the result
		wantErr string
	}{
		{name: "disk in the top layer", Layers: [][]byte{
			cdt.Layer(t, cdt.Dir("etc/"), cdt.File("etc/os-release", []byte("ID=test\n"))),
			cdt.Layer(t, cdt.Dir("disk/"), cdt.File("disk/disk.qcow2", top)),
		}, want: "/disk/disk.qcow2"},
		{name: "top layer replaces the disk", Layers: [][]byte{
			cdt.Layer(t, cdt.File("disk/disk.qcow2", []byte("old"))),
			cdt.Layer(t, cdt.File("disk/disk.qcow2", top)),
		}, want: "/disk/disk.qcow2"},
		{name: "whiteout removes a lower disk", Layers: [][]byte{
			cdt.Layer(t, cdt.File("disk/old.img", []byte("old"))),
			cdt.Layer(t, cdt.File("disk/.wh.old.img", nil), cdt.File("disk/disk.qcow2", top)),
		}, want: "/disk/disk.qcow2"},
		{name: "opaque folder hides the lower disk", Layers: [][]byte{
			cdt.Layer(t, cdt.File("disk/old.img", []byte("old")), cdt.File("disk/sub/x", []byte("x"))),
			cdt.Layer(t, cdt.File("disk/disk.qcow2", top), cdt.File("disk/.wh..wh..opq", nil)),
		}, want: "/disk/disk.qcow2"},
		{name: "containerDisk.path", Layers: [][]byte{
			cdt.Layer(t, cdt.File("boot/vmlinuz", []byte("old"))),
			cdt.Layer(t, cdt.File("boot/vmlinuz", top), cdt.File("disk/disk.qcow2", []byte("d"))),
		}, inImage: "/boot/../boot/vmlinuz", want: "/boot/vmlinuz"},
		{name: "no /disk", Layers: [][]byte{cdt.Layer(t, cdt.File("etc/os-release", nil))},
			wantErr: "no /disk folder: a containerDisk holds one disk file (*.qcow2 or *.img) in /disk/"},
		{name: "empty /disk", Layers: [][]byte{cdt.Layer(t, cdt.Dir("disk/"))},
			wantErr: "no file under /disk"},
		{name: "/disk whited out", Layers: [][]byte{
			cdt.Layer(t, cdt.File("disk/disk.qcow2", top)),
			cdt.Layer(t, cdt.File(".wh.disk", nil)),
		}, wantErr: "no /disk folder"},
		{name: "two disks", Layers: [][]byte{
			cdt.Layer(t, cdt.File("disk/a.img", []byte("a"))),
			cdt.Layer(t, cdt.File("disk/b.qcow2", top)),
		}, wantErr: "2 entries under /disk (a.img, b.qcow2): a containerDisk holds exactly one disk file there, or set containerDisk.path"},
		{name: "a folder in /disk", Layers: [][]byte{cdt.Layer(t, cdt.File("disk/sub/x.img", top))},
			wantErr: "/disk/sub in the image is not a regular file"},
		{name: "symlink disk", Layers: [][]byte{cdt.Layer(t, cdt.File("data/d.img", top), cdt.Entry{Name: "disk/d.img", Type: tar.TypeSymlink, Link: "/data/d.img"})},
			wantErr: "/disk/d.img is a symbolic link to /data/d.img"},
		{name: "missing path", Layers: [][]byte{cdt.Layer(t, cdt.File("disk/d.img", top))}, inImage: "/boot/vmlinuz",
			wantErr: "no file /boot/vmlinuz in the image"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			layout := t.TempDir()
			cdt.Image{Layers: tc.Layers, Gzip: true}.OCILayout(t, layout, "latest")
			r, cache := newResolver(t)
			ref := "oci:" + layout + ":latest"
			res, err := r.File(context.Background(), ref, tc.inImage)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), ref) {
					t.Fatalf("err = %v, want one naming %q and containing %q", err, ref, tc.wantErr)
				}
				if entries, _ := os.ReadDir(cache); len(entries) != 0 {
					t.Fatalf("a failed resolution left %d cache entries", len(entries))
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if b, _ := os.ReadFile(res.Path); string(b) != string(top) || res.InImage != tc.want {
				t.Fatalf("got %+v with %q, want %s with the top layer's content", res, b, tc.want)
			}
			again, err := r.File(context.Background(), ref, tc.inImage)
			if err != nil || !again.Cached || again.Path != res.Path {
				t.Fatalf("second resolution: %+v, %v", again, err)
			}
			cdt.NoLeftovers(t, cache)
		})
	}
}

// TestCorruptLayer changes a layer's bytes under its digest name: the
// resolution fails and caches nothing.
func TestCorruptLayer(t *testing.T) {
	layout := t.TempDir()
	layer := cdt.Layer(t, cdt.File("disk/disk.img", []byte("good disk")))
	cdt.Image{Layers: [][]byte{layer}}.OCILayout(t, layout, "latest")
	bad := strings.Replace(string(layer), "good disk", "evil disk", 1)
	blob := filepath.Join(layout, "blobs", "sha256", cdt.SHA256(layer))
	if err := os.WriteFile(blob, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	r, cache := newResolver(t)
	_, err := r.File(context.Background(), "oci:"+layout, "")
	if err == nil || !strings.Contains(err.Error(), "does not match its digest sha256:"+cdt.SHA256(layer)) {
		t.Fatalf("err = %v, want a digest mismatch", err)
	}
	if entries, _ := os.ReadDir(cache); len(entries) != 0 {
		t.Fatalf("a corrupt image left %d cache entries", len(entries))
	}
}

// TestBadReferences: each error names the reference and what is allowed.
func TestBadReferences(t *testing.T) {
	layout := t.TempDir()
	cdt.Image{Layers: [][]byte{cdt.Layer(t, cdt.File("disk/d.img", []byte("d")))}}.OCILayout(t, layout, "v1")
	tests := []struct{ ref, want string }{
		{"quay.io/kubevirt/cirros:latest", "has no transport: want TRANSPORT:REFERENCE with TRANSPORT one of oci, oci-archive, docker-archive, containers-storage"},
		{"docker://quay.io/kubevirt/cirros:latest", `transport "docker" is not supported here (it needs a registry)`},
		{"oci:", "transport oci needs a path"},
		{"oci:/nonexistent/layout", `image reference "oci:/nonexistent/layout": lstat /nonexistent: no such file or directory`},
		{"oci:" + layout + ":v2", `opening image "oci:` + layout + `:v2"`},
		{"oci-archive:/nonexistent.tar", `"oci-archive:/nonexistent.tar"`},
		{"docker-archive:/nonexistent.tar", `"docker-archive:/nonexistent.tar"`},
		{"containers-storage:", "needs an image name or ID"},
	}
	r, _ := newResolver(t)
	for _, tc := range tests {
		_, err := r.File(context.Background(), tc.ref, "")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("File(%q) = %v, want an error containing %q", tc.ref, err, tc.want)
		}
	}
	for s, want := range map[string]bool{"oci:x": true, "docker://x": true, "containers-storage:x": true, "guest": false, "localhost:5000/x:1": false, "quay.io/x:1": false} {
		if IsReference(s) != want {
			t.Errorf("IsReference(%q) = %v, want %v", s, !want, want)
		}
	}
}

// TestNoStorage: a name looked up where there is no containers-storage is
// refused with ErrNotInStorage and the folder it looked in.
func TestNoStorage(t *testing.T) {
	root := filepath.Join(t.TempDir(), "absent")
	r := New(Options{CacheDir: t.TempDir(), StorageRoot: root})
	_, err := r.LocalFile(context.Background(), "quay.io/kubevirt/cirros-container-disk-demo:devel", "")
	if !errors.Is(err, ErrNotInStorage) || !strings.Contains(err.Error(), root) || !strings.Contains(err.Error(), "cirros-container-disk-demo") {
		t.Fatalf("err = %v, want ErrNotInStorage naming %s and the image", err, root)
	}
	if _, err := os.Stat(root); err == nil {
		t.Fatalf("the lookup created a containers-storage at %s", root)
	}
}

// TestConcurrent: launchers resolving one new image at once each extract
// into a private folder and all end with the one committed copy.
func TestConcurrent(t *testing.T) {
	disk := cdt.FakeQcow2(2<<20, 7)
	layout := t.TempDir()
	cdt.Image{Gzip: true, Layers: [][]byte{cdt.Layer(t, cdt.File("disk/disk.qcow2", disk))}}.OCILayout(t, layout, "latest")
	cache := t.TempDir()
	var wg sync.WaitGroup
	paths := make([]string, 6)
	errs := make([]error, len(paths))
	for i := range paths {
		wg.Go(func() {
			res, err := New(Options{CacheDir: cache}).File(context.Background(), "oci:"+layout, "")
			if err == nil {
				paths[i] = res.Path
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for i := range paths {
		if errs[i] != nil || paths[i] != paths[0] {
			t.Fatalf("resolution %d: %q, %v (first: %q)", i, paths[i], errs[i], paths[0])
		}
	}
	if cdt.SHA256File(t, paths[0]) != cdt.SHA256(disk) {
		t.Fatal("the committed copy is not the disk")
	}
	cdt.NoLeftovers(t, cache)
}

// TestLargeImage measures first and repeat resolution of a large disk
// (CONTAINERDISK_TEST_MB megabytes, e.g. 100), when asked for.
func TestLargeImage(t *testing.T) {
	mb := os.Getenv("CONTAINERDISK_TEST_MB")
	if mb == "" {
		t.Skip("set CONTAINERDISK_TEST_MB=100 to measure a large image")
	}
	var n int
	for _, c := range mb {
		n = n*10 + int(c-'0')
	}
	disk := cdt.FakeQcow2(n<<20, 3)
	dir := t.TempDir()
	for _, gz := range []bool{true, false} {
		img := cdt.Image{Gzip: gz, Layers: [][]byte{cdt.Layer(t, cdt.File("disk/disk.qcow2", disk))}}
		archive := filepath.Join(dir, "big.tar")
		img.OCIArchive(t, archive)
		layout := filepath.Join(dir, "layout")
		os.RemoveAll(layout)
		img.OCILayout(t, layout, "latest")
		for _, ref := range []string{"oci:" + layout, "oci-archive:" + archive} {
			r, _ := newResolver(t)
			start := time.Now()
			if _, err := r.File(context.Background(), ref, ""); err != nil {
				t.Fatal(err)
			}
			firstTime := time.Since(start)
			second, err := r.File(context.Background(), ref, "")
			if err != nil || !second.Cached {
				t.Fatalf("repeat: %+v %v", second, err)
			}
			t.Logf("%d MB disk, gzip=%v, %s: first %v, repeat %v", n, gz, strings.SplitN(ref, ":", 2)[0], firstTime.Round(time.Millisecond), second.Duration.Round(10*time.Microsecond))
		}
	}
}

// TestContainersStorage loads an image made here into the host's
// containers-storage with podman, resolves it by containers-storage:
// reference, by name and by ID, and removes it (by ID) afterwards.
func TestContainersStorage(t *testing.T) {
	podman, err := exec.LookPath("podman")
	if err != nil {
		t.Skip("podman is not installed (apt-get install podman): containers-storage: is not tested")
	}
	if os.Geteuid() != 0 {
		t.Skip("the host's containers-storage needs root")
	}
	disk := cdt.FakeQcow2(1<<20+17, 9)
	name := fmt.Sprintf("crashloop.test/containerdisk-unit-%d:latest", time.Now().UnixNano())
	archive := filepath.Join(t.TempDir(), "disk.oci.tar")
	cdt.Image{Gzip: true, Layers: [][]byte{
		cdt.Layer(t, cdt.File("etc/os-release", []byte("ID=test\n"))),
		cdt.Layer(t, cdt.File("disk/disk.qcow2", disk)),
	}}.OCIArchive(t, archive, name)
	if out, err := exec.Command(podman, "load", "-q", "-i", archive).CombinedOutput(); err != nil {
		t.Fatalf("podman load: %v: %s", err, out)
	}
	out, err := exec.Command(podman, "image", "inspect", "--format", "{{.Id}}", name).Output()
	if err != nil {
		t.Fatalf("podman image inspect %s: %v", name, err)
	}
	id := strings.TrimSpace(string(out))
	t.Cleanup(func() {
		if out, err := exec.Command(podman, "rmi", "-f", id).CombinedOutput(); err != nil {
			t.Errorf("podman rmi %s: %v: %s", id, err, out)
		}
	})
	r := New(Options{CacheDir: t.TempDir()})
	ctx := context.Background()
	first, err := r.File(ctx, "containers-storage:"+name, "")
	if err != nil {
		t.Fatal(err)
	}
	if cdt.SHA256File(t, first.Path) != cdt.SHA256(disk) || first.Cached {
		t.Fatalf("first resolution %+v: wrong content or cached", first)
	}
	for _, n := range []string{name, id} {
		again, err := r.LocalFile(ctx, n, "")
		if err != nil || !again.Cached || again.Path != first.Path {
			t.Fatalf("LocalFile(%s) = %+v, %v; want the cached %s", n, again, err, first.Path)
		}
		t.Logf("containers-storage %s: first %v, repeat %v", n, first.Duration, again.Duration)
	}
	_, err = r.LocalFile(ctx, "crashloop.test/containerdisk-absent:1", "")
	if !errors.Is(err, ErrNotInStorage) || !strings.Contains(err.Error(), "crashloop.test/containerdisk-absent:1") {
		t.Fatalf("absent image: %v, want ErrNotInStorage naming it", err)
	}
	t.Log(err)
}

// TestLayersCannotWriteOutsideTheCache: layer entries whose names climb
// out ("../"), hard links to files outside the image's tree and links
// under the requested path write nothing outside the cache folder.
func TestLayersCannotWriteOutsideTheCache(t *testing.T) {
	top := []byte("QFI\xfbtop")
	for _, tc := range []struct {
		name   string
		layers [][]byte
	}{
		{"names climbing out", [][]byte{cdt.Layer(t, cdt.File("../../../../escaped", top), cdt.File("disk/../../../../escaped2", top), cdt.File("/disk/../../escaped3", top), cdt.File("disk/d.img", top))}},
		// From the extraction folder (CACHE/DIGEST/.extract-N/tree) up to
		// the test's top: one ".." for disk/, seven more.
		{"a name climbing to the test's top", [][]byte{cdt.Layer(t, cdt.File("disk/"+strings.Repeat("../", 8)+"escaped4", top), cdt.File("disk/d.img", top))}},
		{"hard link out of the tree", [][]byte{cdt.Layer(t, cdt.Entry{Name: "disk/d.img", Type: tar.TypeLink, Link: "../../../../victim"})}},
		{"hard link by absolute path", [][]byte{cdt.Layer(t, cdt.Entry{Name: "disk/d.img", Type: tar.TypeLink, Link: "/etc/hostname"})}},
		{"symlink folder then a file through it", [][]byte{
			cdt.Layer(t, cdt.Entry{Name: "disk", Type: tar.TypeSymlink, Link: "../../../../"}),
			cdt.Layer(t, cdt.File("disk/escaped", top)),
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			top := t.TempDir()
			layout := filepath.Join(top, "layout")
			os.Mkdir(layout, 0o755)
			cdt.Image{Layers: tc.layers, Gzip: true}.OCILayout(t, layout, "latest")
			victim := filepath.Join(top, "victim")
			os.WriteFile(victim, []byte("original"), 0o600)
			cache := filepath.Join(top, "a", "b", "c", "containerdisks")
			r := New(Options{CacheDir: cache, StorageRoot: filepath.Join(top, "no-storage")})
			_, _ = r.File(context.Background(), "oci:"+layout+":latest", "")
			filepath.WalkDir(top, func(p string, d fs.DirEntry, err error) error {
				if err != nil || p == cache || p == layout {
					if p == cache || p == layout {
						return filepath.SkipDir
					}
					return err
				}
				if !d.IsDir() && p != victim {
					t.Errorf("a file appeared outside the cache: %s", p)
				}
				return nil
			})
			if b, _ := os.ReadFile(victim); string(b) != "original" {
				t.Errorf("the file outside the cache was changed: %q", b)
			}
		})
	}
}
