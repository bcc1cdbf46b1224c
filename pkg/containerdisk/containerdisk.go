// Package containerdisk resolves a KubeVirt containerDisk image to a disk
// file on the local machine, the way virt-launcher's container-disk
// sidecar finds it in the container's root file system.
//
// An image is read through one of containers/image's local transports
// (oci:, oci-archive:, docker-archive:, containers-storage:). Its layers
// are applied in order, keeping only the requested part of the file
// system: KubeVirt's /disk folder, which must hold exactly one entry, or
// the file a containerDisk.path (or a kernelBoot container's kernelPath)
// names. Each layer's digest is verified while it is read. The result is
// kept in a cache folder keyed by the image's manifest digest, written
// through a temporary folder and a rename, so that concurrent launchers
// extract into private folders and all use one complete copy; a second
// resolution of the same image reads only its manifest.
package containerdisk

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	digest "github.com/opencontainers/go-digest"
	dockerarchive "go.podman.io/image/v5/docker/archive"
	"go.podman.io/image/v5/image"
	"go.podman.io/image/v5/manifest"
	ociarchive "go.podman.io/image/v5/oci/archive"
	ocilayout "go.podman.io/image/v5/oci/layout"
	"go.podman.io/image/v5/types"
)

// DefaultCacheDir is where extracted disks are kept unless Options says
// otherwise: next to the launcher's default QEMU capability cache.
const DefaultCacheDir = "/var/cache/crashloop/containerdisks"

// DiskDir is the folder of KubeVirt's containerDisk layout.
const DiskDir = "/disk"

// Options configure a Resolver. The zero value is usable.
type Options struct {
	// CacheDir keeps the extracted disks, one folder per manifest digest.
	// Empty means DefaultCacheDir.
	CacheDir string
	// BaseDir is the folder relative oci:, oci-archive: and docker-archive:
	// paths are resolved against (the image folder of images.json). Empty
	// means the working directory.
	BaseDir string
	// StorageRoot and StorageRunRoot select the containers-storage to read
	// containers-storage: references from, and to look image names up in.
	// Empty means the host's configuration (storage.conf; as root,
	// /var/lib/containers/storage, which `podman pull` fills).
	StorageRoot    string
	StorageRunRoot string
	// Logger receives one line per extraction. Nil means slog.Default().
	Logger *slog.Logger
}

// Resolver resolves containerDisk images to extracted files. It holds no
// open resources; each call opens and closes what it reads.
type Resolver struct {
	opts Options
	log  *slog.Logger
}

// New returns a Resolver.
func New(opts Options) *Resolver {
	if opts.CacheDir == "" {
		opts.CacheDir = DefaultCacheDir
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Resolver{opts: opts, log: log}
}

// Result is a resolved file.
type Result struct {
	// Path is the extracted file in the cache. It is read-only and shared
	// between launches: use it as the backing file of an overlay.
	Path string
	// InImage is the file's path inside the image, e.g. /disk/disk.qcow2.
	InImage string
	// Digest is the manifest digest of the image (the cache key).
	Digest digest.Digest
	// Cached is true when the file was already extracted.
	Cached bool
	// Duration is how long the resolution took.
	Duration time.Duration
}

// ErrNotInStorage is matched by the error LocalFile returns when the name
// is not an image in the local containers-storage (or there is none).
var ErrNotInStorage = errors.New("image not in the local containers-storage")

// File resolves a file of the image that the transport reference ref
// (oci:PATH[:REF], oci-archive:PATH, docker-archive:PATH,
// containers-storage:NAME) names. An empty inImage means KubeVirt's
// containerDisk rule: the one entry of /disk.
func (r *Resolver) File(ctx context.Context, ref, inImage string) (*Result, error) {
	start := time.Now()
	transport, rest, err := splitReference(ref, r.opts.BaseDir)
	if err != nil {
		return nil, err
	}
	var res *Result
	if transport == TransportContainersStorage {
		res, err = r.fromStorage(ctx, ref, rest, inImage)
	} else {
		var iref types.ImageReference
		iref, err = parseFileReference(transport, rest)
		if err != nil {
			return nil, fmt.Errorf("image reference %q: %w", ref, err)
		}
		res, err = r.resolve(ctx, ref, iref, inImage)
	}
	if err != nil {
		return nil, err
	}
	res.Duration = time.Since(start)
	return res, nil
}

// LocalFile resolves a file of the image called name (as a Kubernetes
// manifest writes it: a short name means docker.io, as the kubelet reads
// it) in the local containers-storage. When the image is not there, the
// error matches ErrNotInStorage and names the storage folder.
func (r *Resolver) LocalFile(ctx context.Context, name, inImage string) (*Result, error) {
	start := time.Now()
	res, err := r.fromStorage(ctx, name, name, inImage)
	if err != nil {
		return nil, err
	}
	res.Duration = time.Since(start)
	return res, nil
}

func parseFileReference(transport, rest string) (types.ImageReference, error) {
	switch transport {
	case TransportOCI:
		return ocilayout.ParseReference(rest)
	case TransportOCIArchive:
		return ociarchive.ParseReference(rest)
	case TransportDockerArchive:
		return dockerarchive.ParseReference(rest)
	}
	return nil, fmt.Errorf("transport %q is not a file transport", transport)
}

// resolve reads the manifest of iref, returns the cached file when the
// digest has been extracted before, and extracts it otherwise.
func (r *Resolver) resolve(ctx context.Context, display string, iref types.ImageReference, inImage string) (*Result, error) {
	want, err := scope(inImage)
	if err != nil {
		return nil, fmt.Errorf("image %q: %w", display, err)
	}
	if err := os.MkdirAll(r.opts.CacheDir, 0o755); err != nil {
		return nil, fmt.Errorf("creating the containerDisk cache: %w", err)
	}
	sys := &types.SystemContext{BigFilesTemporaryDir: r.opts.CacheDir}
	src, err := iref.NewImageSource(ctx, sys)
	if err != nil {
		return nil, fmt.Errorf("opening image %q: %w", display, err)
	}
	defer src.Close()

	blob, mimeType, err := src.GetManifest(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("reading the manifest of image %q: %w", display, err)
	}
	var instance *digest.Digest
	if manifest.MIMETypeIsMultiImage(mimeType) {
		list, err := manifest.ListFromBlob(blob, mimeType)
		if err != nil {
			return nil, fmt.Errorf("parsing the manifest list of image %q: %w", display, err)
		}
		d, err := list.ChooseInstance(sys)
		if err != nil {
			return nil, fmt.Errorf("image %q: choosing the manifest for this machine: %w", display, err)
		}
		instance = &d
		if blob, _, err = src.GetManifest(ctx, instance); err != nil {
			return nil, fmt.Errorf("reading manifest %s of image %q: %w", d, display, err)
		}
	}
	dig, err := manifest.Digest(blob)
	if err != nil {
		return nil, fmt.Errorf("digesting the manifest of image %q: %w", display, err)
	}
	if instance != nil && dig != *instance {
		return nil, fmt.Errorf("image %q: manifest %s has digest %s", display, *instance, dig)
	}

	entry := filepath.Join(r.opts.CacheDir, dig.Algorithm().String()+"-"+dig.Encoded())
	final := filepath.Join(entry, cacheName(want, inImage))
	if p, in, err := pick(final, want, inImage); err == nil {
		return &Result{Path: p, InImage: in, Digest: dig, Cached: true}, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("image %q: cached copy %s: %w", display, final, err)
	}

	img, err := image.FromUnparsedImage(ctx, sys, image.UnparsedInstance(src, instance))
	if err != nil {
		return nil, fmt.Errorf("reading image %q: %w", display, err)
	}
	layers, err := img.LayerInfosForCopy(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing the layers of image %q: %w", display, err)
	}
	if layers == nil {
		layers = img.LayerInfos()
	}
	if err := os.MkdirAll(entry, 0o755); err != nil {
		return nil, fmt.Errorf("creating the containerDisk cache entry: %w", err)
	}
	staging, err := os.MkdirTemp(entry, ".extract-")
	if err != nil {
		return nil, fmt.Errorf("creating an extraction folder: %w", err)
	}
	defer func() {
		os.RemoveAll(staging)
		os.Remove(entry) // only when empty: a failed first extraction leaves nothing
	}()
	start := time.Now()
	written, err := extract(ctx, src, layers, want, filepath.Join(staging, "tree"))
	if err != nil {
		return nil, fmt.Errorf("image %q (%s): %w", display, dig, err)
	}
	// Check the rule on the staged copy, so that a bad image leaves no
	// cache entry behind.
	staged, err := stage(staging, want, inImage)
	if err != nil {
		return nil, fmt.Errorf("image %q (%s): %w", display, dig, err)
	}
	ours, err := commit(staged, final)
	if err != nil {
		return nil, fmt.Errorf("image %q: storing the extracted copy: %w", display, err)
	}
	p, in, err := pick(final, want, inImage)
	if err != nil {
		return nil, fmt.Errorf("image %q: cached copy %s: %w", display, final, err)
	}
	if !ours {
		r.log.Info("containerDisk extracted by another launcher at the same time; using its copy", "image", display, "digest", dig.String(), "path", p)
		return &Result{Path: p, InImage: in, Digest: dig, Cached: true}, nil
	}
	r.log.Info("containerDisk extracted", "image", display, "digest", dig.String(), "file", in,
		"path", p, "bytes", written, "layers", len(layers), "duration", time.Since(start).Round(time.Millisecond).String())
	return &Result{Path: p, InImage: in, Digest: dig}, nil
}

// scope turns the requested in-image path into the slash-separated,
// root-relative subtree to extract: "disk" for KubeVirt's rule.
func scope(inImage string) (string, error) {
	if inImage == "" {
		return strings.TrimPrefix(DiskDir, "/"), nil
	}
	clean := strings.TrimPrefix(path.Clean("/"+inImage), "/")
	if clean == "" {
		return "", fmt.Errorf("path %q names the image's root, not a file", inImage)
	}
	return clean, nil
}

// cacheName is the name of a resolution's folder inside a digest's cache
// entry: "disk" for KubeVirt's rule (it is the image's /disk folder), and
// one folder per requested path otherwise.
func cacheName(want, inImage string) string {
	if inImage == "" {
		return want
	}
	sum := sha256.Sum256([]byte(want))
	return "path-" + hex.EncodeToString(sum[:8])
}

// pick finds the resolved file in a committed folder: for KubeVirt's rule
// the folder is the image's /disk and must hold exactly one regular file;
// for a path it holds that one file under its base name. A missing folder
// is an error matching fs.ErrNotExist.
func pick(folder, want, inImage string) (file, in string, err error) {
	if inImage != "" {
		p := filepath.Join(folder, path.Base(want))
		fi, err := os.Stat(p)
		if err != nil {
			return "", "", err
		}
		if !fi.Mode().IsRegular() {
			return "", "", fmt.Errorf("/%s in the image is not a regular file", want)
		}
		return p, "/" + want, nil
	}
	entries, err := os.ReadDir(folder)
	if err != nil {
		return "", "", err
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	slices.Sort(names)
	switch {
	case len(names) == 0:
		return "", "", fmt.Errorf("no file under %s: a containerDisk holds one disk file (*.qcow2 or *.img) in %s/, or set containerDisk.path", DiskDir, DiskDir)
	case len(names) > 1:
		return "", "", fmt.Errorf("%d entries under %s (%s): a containerDisk holds exactly one disk file there, or set containerDisk.path", len(names), DiskDir, strings.Join(names, ", "))
	}
	if !entries[0].Type().IsRegular() {
		return "", "", fmt.Errorf("%s/%s in the image is not a regular file", DiskDir, names[0])
	}
	return filepath.Join(folder, names[0]), DiskDir + "/" + names[0], nil
}

// stage checks the extracted tree against the request and returns the
// folder to commit: the staged /disk for KubeVirt's rule, or a folder
// holding only the requested file.
func stage(staging, want, inImage string) (string, error) {
	src := filepath.Join(staging, "tree", filepath.FromSlash(want))
	if inImage == "" {
		if _, err := os.Stat(src); err != nil {
			return "", fmt.Errorf("no %s folder: a containerDisk holds one disk file (*.qcow2 or *.img) in %s/", DiskDir, DiskDir)
		}
		if _, _, err := pick(src, want, inImage); err != nil {
			return "", err
		}
		return src, nil
	}
	fi, err := os.Lstat(src)
	if err != nil {
		return "", fmt.Errorf("no file /%s in the image", want)
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("/%s in the image is not a regular file", want)
	}
	out := filepath.Join(staging, "out")
	if err := os.Mkdir(out, 0o755); err != nil {
		return "", err
	}
	return out, os.Rename(src, filepath.Join(out, path.Base(want)))
}

// commit moves a staged folder to its cache place. When another launcher
// committed the same folder first, its copy is kept and ours is dropped
// with the staging folder. It reports whether our copy was the one kept.
func commit(staged, final string) (bool, error) {
	if err := os.Rename(staged, final); err != nil {
		if _, serr := os.Stat(final); serr == nil {
			return false, nil
		}
		return false, err
	}
	return true, nil
}
