package containerdisk

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// maxLayerFiles bounds what one input may declare, so that an iteration
// stays cheap: a sparse tar entry can declare terabytes in a few bytes,
// which is a disk image's right, not a bug.
const maxLayerFiles = 16 << 20

// layerTar is a tar of the given entries, for seeds and tests.
func layerTar(tb testing.TB, entries ...tar.Header) []byte {
	var buf bytes.Buffer
	w := tar.NewWriter(&buf)
	for _, h := range entries {
		body := ""
		if h.Typeflag == tar.TypeReg {
			body = "data of " + h.Name
			h.Size = int64(len(body))
		}
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		if err := w.WriteHeader(&h); err != nil {
			tb.Fatal(err)
		}
		if _, err := io.WriteString(w, body); err != nil {
			tb.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		tb.Fatal(err)
	}
	return buf.Bytes()
}

func reg(name string) tar.Header { return tar.Header{Name: name, Typeflag: tar.TypeReg} }
func dir(name string) tar.Header { return tar.Header{Name: name, Typeflag: tar.TypeDir, Mode: 0o755} }
func symlink(name, to string) tar.Header {
	return tar.Header{Name: name, Typeflag: tar.TypeSymlink, Linkname: to}
}
func hardlink(name, to string) tar.Header {
	return tar.Header{Name: name, Typeflag: tar.TypeLink, Linkname: to}
}

// extractSeeds are small valid layers with a disk file, and layers that try
// to leave the extraction folder: ../, absolute paths, a symbolic link and
// a file through it, hard links to outside, whiteouts of ...
func extractSeeds(tb testing.TB) [][]byte {
	return [][]byte{
		layerTar(tb, dir("disk/"), reg("disk/disk.img")),
		layerTar(tb, reg("disk/disk.qcow2"), reg("etc/os-release"), hardlink("disk/copy.img", "disk/disk.qcow2")),
		layerTar(tb, dir("disk"), reg("disk/a.img"), reg("disk/.wh.a.img"), reg("disk/.wh..wh..opq"), reg("disk/b.img")),
		layerTar(tb, reg("../outside/x"), reg("disk/../../outside/y")),
		layerTar(tb, reg("/outside/abs"), reg("/disk/abs.img")),
		layerTar(tb, symlink("disk/link", "../../outside"), reg("disk/link/through")),
		layerTar(tb, symlink("disk", "/outside"), reg("disk/through")),
		layerTar(tb, hardlink("disk/hard", "../outside/canary")),
		layerTar(tb, hardlink("disk/hard", "/etc/passwd")),
		layerTar(tb, reg("disk/.wh..."), reg("disk/.wh.."), reg(".wh.disk")),
	}
}

// extractEnv is a tree with the extraction folder in it and, beside it, a
// folder with a canary file that no layer may touch.
type extractEnv struct {
	root, out, canary string
}

func newExtractEnv(tb testing.TB) extractEnv {
	root := tb.TempDir()
	e := extractEnv{root: root, out: filepath.Join(root, "a", "b", "out"), canary: filepath.Join(root, "a", "outside", "canary")}
	for _, d := range []string{filepath.Dir(e.canary), filepath.Dir(e.out)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			tb.Fatal(err)
		}
	}
	if err := os.WriteFile(e.canary, []byte("canary"), 0o644); err != nil {
		tb.Fatal(err)
	}
	return e
}

// run applies layer twice (as layers 0 and 1, so that its whiteouts and
// replacements meet its own entries) with the subtree want into a fresh
// out folder, and returns the broken properties: a path made outside it, a
// canary changed or linked, a symbolic link or a special file inside it.
func (e extractEnv) run(tb testing.TB, layer []byte, want string) []string {
	if declared(layer) > maxLayerFiles {
		return nil
	}
	defer os.RemoveAll(e.out)
	before := paths(tb, e.root)
	if err := os.MkdirAll(e.out, 0o755); err != nil {
		tb.Fatal(err)
	}
	root, err := os.OpenRoot(e.out)
	if err != nil {
		tb.Fatal(err)
	}
	defer root.Close()
	t := &tree{root: root, want: want, entries: map[string]int{}}
	for i := range 2 {
		if _, err := t.applyTar(tar.NewReader(bytes.NewReader(layer)), i); err != nil {
			break
		}
	}
	var problems []string
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	for p := range paths(tb, e.root) {
		if !before[p] && p != e.out && !strings.HasPrefix(p, e.out+string(filepath.Separator)) {
			bad("made %s outside the extraction folder", p)
		}
	}
	if data, err := os.ReadFile(e.canary); err != nil || string(data) != "canary" {
		bad("the canary beside the folder changed: %q, %v", data, err)
	} else if fi, err := os.Stat(e.canary); err == nil && fi.Sys().(*syscall.Stat_t).Nlink != 1 {
		bad("the canary beside the folder has %d links", fi.Sys().(*syscall.Stat_t).Nlink)
	}
	_ = filepath.WalkDir(e.out, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.Type().IsRegular() && !d.IsDir() {
			bad("%s in the extraction folder is a %v", p, d.Type())
		}
		return nil
	})
	return problems
}

// describe lists a layer's entries, for messages.
func describe(layer []byte) string {
	var out []string
	tr := tar.NewReader(bytes.NewReader(layer))
	for {
		h, err := tr.Next()
		if err != nil {
			return "[" + strings.Join(out, ", ") + "]"
		}
		out = append(out, fmt.Sprintf("%q type %q link %q size %d", h.Name, h.Typeflag, h.Linkname, h.Size))
	}
}

// declared is the size the layer's entries declare, up to the first bad
// header.
func declared(layer []byte) int64 {
	var n int64
	tr := tar.NewReader(bytes.NewReader(layer))
	for {
		h, err := tr.Next()
		if err != nil {
			return n
		}
		n += max(h.Size, 0)
	}
}

// paths lists every path under root.
func paths(tb testing.TB, root string) map[string]bool {
	out := map[string]bool{}
	if err := filepath.WalkDir(root, func(p string, _ fs.DirEntry, err error) error {
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		out[p] = true
		return nil
	}); err != nil {
		tb.Fatal(err)
	}
	return out
}

// FuzzExtract applies an OCI layer tar to an extraction folder as a
// containerDisk's layers are (the tree of extract.go, which keeps the
// subtree /disk, or one file's path): nothing may be made or changed
// outside the folder, nothing but folders and regular files inside it, and
// no input may panic. Errors are fine (refused layers).
func FuzzExtract(f *testing.F) {
	for _, s := range extractSeeds(f) {
		f.Add(s, false)
		f.Add(s, true)
	}
	env := newExtractEnv(f)
	f.Fuzz(func(t *testing.T, layer []byte, onePath bool) {
		want := "disk"
		if onePath {
			want = "disk/disk.img"
		}
		if problems := env.run(t, layer, want); len(problems) > 0 {
			t.Fatalf("layer %s:\n- %s", describe(layer), strings.Join(problems, "\n- "))
		}
	})
}
