package converter

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"strconv"
	"strings"

	k8sv1 "k8s.io/api/core/v1"
	v1 "kubevirt.io/api/core/v1"

	"github.com/crashloop-harness/crashloop/internal/confine"
)

// importDataVolume materialises a VM's dataVolumeTemplate in the claim
// folder as CDI would import it onto a file-system PVC: a registry image's
// disk (from the image folder) converted to DIR/NAME/disk.img in raw and
// grown to the requested size, or a blank raw image of that size. A claim
// that already has its disk image is left alone (the DataVolume exists).
// field names the template for errors; a dry run only checks the source.
func importDataVolume(ctx context.Context, dvt *v1.DataVolumeTemplateSpec, field string, opts *DomainOptions) error {
	name := dvt.Name
	if opts.ClaimDir == "" {
		return &SpecError{Field: field, Msg: fmt.Sprintf("data volume %q needs a claim folder to be imported into (pass --claim-dir DIR; it becomes DIR/%s/disk.img)", name, name)}
	}
	if err := confine.Name(name); err != nil {
		return &SpecError{Field: field + ".metadata.name", Msg: "claim name " + err.Error()}
	}
	// Looked up through an os.Root of the claim folder: a claim folder
	// that is a link out of it is refused, not imported into.
	if _, _, err := confine.Stat(opts.ClaimDir, name, "disk.img"); err == nil {
		return nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return &SpecError{Field: field, Msg: fmt.Sprintf("claim %q: %v", name, err)}
	}
	size, err := dataVolumeSize(dvt, field)
	if err != nil {
		return err
	}
	src := dvt.Spec.Source
	if src == nil || (src.Registry == nil && src.Blank == nil) {
		return &SpecError{Field: field + ".spec.source", Msg: "only registry and blank sources can be imported on one machine (no CDI, no network): import it into the claim folder yourself"}
	}
	from := ""
	if r := src.Registry; r != nil {
		if r.URL == nil || !strings.HasPrefix(*r.URL, "docker://") {
			return &SpecError{Field: field + ".spec.source.registry.url", Msg: "must be docker://IMAGE, an image the image folder (images.json) or the local containers-storage knows"}
		}
		if opts.Images == nil {
			return &SpecError{Field: field + ".spec.source.registry.url", Msg: "no image folder to resolve it (pass --image-dir)"}
		}
		if from, err = opts.Images.Disk(strings.TrimPrefix(*r.URL, "docker://"), ""); err != nil {
			return &SpecError{Field: field + ".spec.source.registry.url", Msg: err.Error()}
		}
	}
	if opts.DryRun {
		return nil
	}
	if err := os.MkdirAll(opts.ClaimDir, 0o700); err != nil {
		return &SpecError{Field: field, Msg: fmt.Sprintf("creating the claim folder: %v", err)}
	}
	if _, err := confine.MkdirAll(opts.ClaimDir, 0o700, name); err != nil {
		return &SpecError{Field: field, Msg: fmt.Sprintf("creating the claim folder: %v", err)}
	}
	if err := writeImport(ctx, from, opts.ClaimDir, name, size); err != nil {
		_ = confine.Remove(opts.ClaimDir, name, "disk.img")
		return &SpecError{Field: field, Msg: err.Error()}
	}
	return nil
}

// writeImport writes the claim name's disk.img in claims (created
// owner-only through an os.Root of claims first): from converted to raw
// (from's own format is the image store's, read-only image) and grown to
// size, or a sparse raw file of size when from is empty.
func writeImport(ctx context.Context, from, claims, name string, size int64) error {
	f, dst, err := confine.Create(claims, 0o600, name, "disk.img")
	if err != nil {
		return fmt.Errorf("creating the claim's disk image: %w", err)
	}
	if from == "" {
		if err := f.Truncate(size); err != nil {
			f.Close()
			return fmt.Errorf("sizing disk %s: %w", dst, err)
		}
		return f.Close()
	}
	f.Close()
	format, err := ContainerDiskFormat(from)
	if err != nil {
		return err
	}
	if out, err := exec.CommandContext(ctx, "qemu-img", "convert", "-f", format, "-O", "raw", from, dst).CombinedOutput(); err != nil {
		return fmt.Errorf("importing %s with qemu-img: %v: %s", from, err, strings.TrimSpace(string(out)))
	}
	fi, err := os.Stat(dst)
	if err != nil {
		return err
	}
	if fi.Size() < size {
		// CDI grows the image to the claim's size.
		if out, err := exec.CommandContext(ctx, "qemu-img", "resize", "-q", "-f", "raw", dst, strconv.FormatInt(size, 10)).CombinedOutput(); err != nil {
			return fmt.Errorf("growing %s with qemu-img: %v: %s", dst, err, strings.TrimSpace(string(out)))
		}
	}
	return nil
}

// dataVolumeSize is the storage the template asks for (spec.pvc or
// spec.storage).
func dataVolumeSize(dvt *v1.DataVolumeTemplateSpec, field string) (int64, error) {
	var req k8sv1.ResourceList
	switch {
	case dvt.Spec.PVC != nil:
		req, field = dvt.Spec.PVC.Resources.Requests, field+".spec.pvc.resources.requests.storage"
	case dvt.Spec.Storage != nil:
		req, field = dvt.Spec.Storage.Resources.Requests, field+".spec.storage.resources.requests.storage"
	default:
		return 0, &SpecError{Field: field + ".spec.storage", Msg: "must be set (the size to import into)"}
	}
	q, ok := req[k8sv1.ResourceStorage]
	if !ok || q.Value() <= 0 {
		return 0, &SpecError{Field: field, Msg: "must be a positive size (for example 2Gi)"}
	}
	return q.Value(), nil
}
