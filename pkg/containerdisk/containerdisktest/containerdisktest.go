// Package containerdisktest makes small container images in tests, without
// a registry or container tools: layers from a list of tar entries, written
// as an OCI layout, an oci-archive or a docker-archive, in the shape of a
// KubeVirt containerDisk (a disk file under /disk/).
package containerdisktest

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	digest "github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	imgspecv1 "github.com/opencontainers/image-spec/specs-go/v1"
)

// Entry is one tar entry of a layer.
type Entry struct {
	Name string
	Data []byte
	Type byte // tar.TypeReg when zero
	Link string
}

// File is a regular file entry.
func File(name string, data []byte) Entry { return Entry{Name: name, Data: data} }

// Dir is a folder entry.
func Dir(name string) Entry { return Entry{Name: name, Type: tar.TypeDir} }

// Layer renders entries as an uncompressed layer.
func Layer(t testing.TB, entries ...Entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.Name, Mode: 0o644, Typeflag: e.Type, Linkname: e.Link, ModTime: time.Unix(1700000000, 0)}
		switch e.Type {
		case 0:
			h.Typeflag = tar.TypeReg
			h.Size = int64(len(e.Data))
		case tar.TypeDir:
			h.Mode = 0o755
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write(e.Data); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// Gzip compresses b as gzip.
func Gzip(t testing.TB, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// Image is an image made in a test: its layers (uncompressed tars),
// written as an OCI layout, an oci-archive or a docker-archive.
type Image struct {
	Layers [][]byte
	Gzip   bool // OCI layers gzip-compressed
}

func writeBlob(t testing.TB, layout string, b []byte) imgspecv1.Descriptor {
	t.Helper()
	d := digest.FromBytes(b)
	p := filepath.Join(layout, "blobs", d.Algorithm().String(), d.Encoded())
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return imgspecv1.Descriptor{Digest: d, Size: int64(len(b))}
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func (img Image) config(t testing.TB) []byte {
	cfg := imgspecv1.Image{Platform: imgspecv1.Platform{Architecture: "amd64", OS: "linux"}, RootFS: imgspecv1.RootFS{Type: "layers"}}
	for _, l := range img.Layers {
		cfg.RootFS.DiffIDs = append(cfg.RootFS.DiffIDs, digest.FromBytes(l))
	}
	return mustJSON(t, cfg)
}

// OCILayout writes the image as an OCI layout in folder layout, tagged
// tag, and returns the manifest digest.
func (img Image) OCILayout(t testing.TB, layout, tag string) digest.Digest {
	t.Helper()
	cfg := writeBlob(t, layout, img.config(t))
	cfg.MediaType = imgspecv1.MediaTypeImageConfig
	m := imgspecv1.Manifest{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: imgspecv1.MediaTypeImageManifest, Config: cfg}
	for _, l := range img.Layers {
		mt := imgspecv1.MediaTypeImageLayer
		if img.Gzip {
			l, mt = Gzip(t, l), imgspecv1.MediaTypeImageLayerGzip
		}
		d := writeBlob(t, layout, l)
		d.MediaType = mt
		m.Layers = append(m.Layers, d)
	}
	md := writeBlob(t, layout, mustJSON(t, m))
	md.MediaType = imgspecv1.MediaTypeImageManifest
	md.Annotations = map[string]string{imgspecv1.AnnotationRefName: tag}
	index := imgspecv1.Index{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: imgspecv1.MediaTypeImageIndex, Manifests: []imgspecv1.Descriptor{md}}
	if err := os.WriteFile(filepath.Join(layout, imgspecv1.ImageIndexFile), mustJSON(t, index), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(layout, imgspecv1.ImageLayoutFile), mustJSON(t, imgspecv1.ImageLayout{Version: imgspecv1.ImageLayoutVersion}), 0o644); err != nil {
		t.Fatal(err)
	}
	return md.Digest
}

// tarFolder writes the files of folder as a tar archive at out.
func tarFolder(t testing.TB, folder, out string) {
	t.Helper()
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	tw := tar.NewWriter(f)
	if err := tw.AddFS(os.DirFS(folder)); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// OCIArchive writes the image as an oci-archive file, tagged tag ("latest"
// when not given).
func (img Image) OCIArchive(t testing.TB, out string, tag ...string) {
	t.Helper()
	layout := t.TempDir()
	img.OCILayout(t, layout, append(tag, "latest")[0])
	tarFolder(t, layout, out)
}

// DockerArchive writes the image as a docker-archive file (docker save's
// format: manifest.json, the config and one layer.tar per layer).
func (img Image) DockerArchive(t testing.TB, out, tag string) {
	t.Helper()
	folder := t.TempDir()
	cfg := img.config(t)
	cfgName := digest.FromBytes(cfg).Encoded() + ".json"
	os.WriteFile(filepath.Join(folder, cfgName), cfg, 0o644)
	type item struct {
		Config   string
		RepoTags []string
		Layers   []string
	}
	m := item{Config: cfgName, RepoTags: []string{tag}}
	for _, l := range img.Layers {
		name := digest.FromBytes(l).Encoded() + "/layer.tar"
		os.MkdirAll(filepath.Join(folder, filepath.Dir(name)), 0o755)
		os.WriteFile(filepath.Join(folder, name), l, 0o644)
		m.Layers = append(m.Layers, name)
	}
	os.WriteFile(filepath.Join(folder, "manifest.json"), mustJSON(t, []item{m}), 0o644)
	tarFolder(t, folder, out)
}

// FakeQcow2 is n bytes that start with the qcow2 magic, half data (a
// function of seed) and half zero blocks: content for the resolver, not a
// disk QEMU can open.
func FakeQcow2(n int, seed byte) []byte {
	b := make([]byte, n)
	copy(b, "QFI\xfb")
	x := uint32(seed) + 1
	for i := 4; i < n; i++ {
		// Half of the image zeros (holes), half data.
		if (i/(64<<10))%2 == 1 {
			continue
		}
		x = x*1664525 + 1013904223
		b[i] = byte(x >> 24)
	}
	return b
}

// SHA256File is the hex sha256 of a file.
func SHA256File(t testing.TB, p string) string {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// SHA256 is the hex sha256 of b.
func SHA256(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// NoLeftovers fails the test when the cache holds extraction folders.
func NoLeftovers(t testing.TB, cache string) {
	t.Helper()
	filepath.WalkDir(cache, func(p string, d fs.DirEntry, err error) error {
		if err == nil && strings.HasPrefix(d.Name(), ".extract-") {
			t.Errorf("leftover extraction folder %s", p)
		}
		return nil
	})
}
