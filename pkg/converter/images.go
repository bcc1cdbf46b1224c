package converter

import (
	"encoding/json"
	"fmt"
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
