package converter

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// ImageIndexFile is the name of the index in an image folder: a JSON object
// mapping image references (as written in containerDisk.image or
// kernelBoot.container.image) to folders, relative to the image folder or
// absolute.
const ImageIndexFile = "images.json"

// ImageStore resolves container image references to local folders. It plays
// the part of a container runtime's image store: a referenced image's folder
// holds the files a KubeVirt container disk or kernel-boot container would
// carry (kernel and initrd at their paths, disks under disk/).
type ImageStore struct {
	dir   string
	index map[string]string
	// disks reads the images that are not folders (containerdisk.go).
	disks containerDisks
}

// OpenImageStore reads the index of an image folder.
func OpenImageStore(dir string) (*ImageStore, error) {
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	path := filepath.Join(dir, ImageIndexFile)
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading image index (build the test guest with `make images`, or pass --image-dir): %w", err)
	}
	var index map[string]string
	if err := json.Unmarshal(data, &index); err != nil {
		return nil, fmt.Errorf("parsing image index %s: %w", path, err)
	}
	return &ImageStore{dir: dir, index: index}, nil
}

// References lists the known image references, sorted.
func (s *ImageStore) References() []string {
	refs := make([]string, 0, len(s.index))
	for r := range s.index {
		refs = append(refs, r)
	}
	slices.Sort(refs)
	return refs
}

// Root returns the folder of an image reference, or an error that lists
// the known references.
func (s *ImageStore) Root(ref string) (string, error) {
	rel, ok := s.index[ref]
	if !ok {
		return "", fmt.Errorf("unknown image %q: the image folder %s knows %s", ref, s.dir, strings.Join(s.References(), ", "))
	}
	if filepath.IsAbs(rel) {
		return filepath.Clean(rel), nil
	}
	return filepath.Join(s.dir, rel), nil
}

// File resolves a path inside an image. The path must stay inside the image.
func (s *ImageStore) File(ref, inImage string) (string, error) {
	if p, ok, err := s.fromImage(ref, inImage, false); ok {
		return p, err
	}
	root, err := s.Root(ref)
	if err != nil {
		return "", err
	}
	clean := filepath.Join("/", inImage)
	full := filepath.Join(root, clean)
	if _, err := os.Stat(full); err != nil {
		return "", fmt.Errorf("image %q has no file %s: %w", ref, clean, err)
	}
	return full, nil
}

// Disk resolves a containerDisk: the file at path when given, otherwise the
// single file under /disk of the image (KubeVirt's containerDisk convention).
func (s *ImageStore) Disk(ref, path string) (string, error) {
	if p, ok, err := s.fromImage(ref, path, true); ok {
		return p, err
	}
	if path != "" {
		return s.File(ref, path)
	}
	root, err := s.Root(ref)
	if err != nil {
		return "", err
	}
	entries, err := os.ReadDir(filepath.Join(root, "disk"))
	if err != nil {
		return "", fmt.Errorf("image %q has no /disk folder for a containerDisk: %w", ref, err)
	}
	var files []string
	for _, e := range entries {
		if e.Type().IsRegular() {
			files = append(files, e.Name())
		}
	}
	if len(files) != 1 {
		return "", fmt.Errorf("image %q has %d files under /disk, want exactly one (or set containerDisk.path)", ref, len(files))
	}
	return filepath.Join(root, "disk", files[0]), nil
}

// ContainerDiskFormat is the format of a containerDisk's image, as the
// image store (or virt-handler's mount of it) holds it: qcow2 or raw,
// checked as KubeVirt's virt-handler checks it (VerifyImage) before its
// launcher names the format as the overlay's backing format. A qcow2
// image that names a backing file or an external data file is refused:
// QEMU would open that file too. Only read-only images are read so; the
// disks a guest writes are never probed (their format is raw).
func ContainerDiskFormat(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("opening the containerDisk image: %w", err)
	}
	defer f.Close()
	h := make([]byte, 80)
	n, err := io.ReadFull(f, h)
	if n < 4 || string(h[:4]) != "QFI\xfb" {
		return "raw", nil
	}
	if err != nil {
		return "", fmt.Errorf("containerDisk image %s: a qcow2 image with a short header: %w", path, err)
	}
	if binary.BigEndian.Uint64(h[8:16]) != 0 {
		return "", fmt.Errorf("containerDisk image %s is a qcow2 image with a backing file: refused, as KubeVirt refuses it", path)
	}
	// Version 3 headers have incompatible feature bits; bit 2 is an
	// external data file.
	if binary.BigEndian.Uint32(h[4:8]) >= 3 && binary.BigEndian.Uint64(h[72:80])&(1<<2) != 0 {
		return "", fmt.Errorf("containerDisk image %s is a qcow2 image with an external data file: refused", path)
	}
	return "qcow2", nil
}
