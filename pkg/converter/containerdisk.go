package converter

import (
	"context"
	"errors"
	"fmt"
	"strings"

	v1 "kubevirt.io/api/core/v1"

	"github.com/crashloop-harness/crashloop/pkg/containerdisk"
)

// containerDisks reads the images of an ImageStore that are not folders.
type containerDisks = *containerdisk.Resolver

// UseContainerDisks sets how images that images.json maps to a
// containers/image transport reference (or does not list) are read: where
// their disks are cached and which containers-storage names are looked up
// in. Relative archive paths in images.json are resolved against the image
// folder. Without a call, the defaults of containerdisk.Options apply.
func (s *ImageStore) UseContainerDisks(opts containerdisk.Options) {
	opts.BaseDir = s.dir
	s.disks = containerdisk.New(opts)
}

// fromImage resolves a file of an image that is not a folder: one that
// images.json maps to a transport reference (oci:, oci-archive:,
// docker-archive:, containers-storage:), or one it does not list, which is
// looked up in the local containers-storage. An empty inImage with disk
// set is KubeVirt's /disk rule. handled is false for the images that
// images.json maps to a folder, which the caller resolves as before.
func (s *ImageStore) fromImage(ref, inImage string, disk bool) (path string, handled bool, err error) {
	if !disk && inImage == "" {
		return "", false, nil
	}
	r := s.disks
	if r == nil {
		r = containerdisk.New(containerdisk.Options{BaseDir: s.dir})
	}
	ctx := context.Background()
	value, listed := s.index[ref]
	var res *containerdisk.Result
	switch {
	case listed && containerdisk.IsReference(value):
		res, err = r.File(ctx, value, inImage)
	case listed:
		return "", false, nil
	default:
		res, err = r.LocalFile(ctx, ref, inImage)
		if errors.Is(err, containerdisk.ErrNotInStorage) {
			return "", true, fmt.Errorf("unknown image %q: the image folder %s knows %s; and %v", ref, s.dir, strings.Join(s.References(), ", "), err)
		}
	}
	if err != nil {
		return "", true, err
	}
	return res.Path, true, nil
}

// containerDiskSource is a containerDisk volume's image, ephemeral, with
// the format its verified image says: virt-handler's bind mount of it
// when there is one, else the image store's copy.
func containerDiskSource(vmi *v1.VirtualMachineInstance, v *v1.Volume, field string, opts *DomainOptions) (source, error) {
	p, ok := kubeVirtDiskFile(opts, containerDiskTarget(vmi, v.Name))
	if !ok {
		if opts.Images == nil {
			return source{}, &SpecError{Field: field + ".containerDisk.image", Msg: "no image folder to resolve it (pass --image-dir)" + notMounted(opts, containerDiskTarget(vmi, v.Name))}
		}
		var err error
		if p, err = opts.Images.Disk(v.ContainerDisk.Image, v.ContainerDisk.Path); err != nil {
			return source{}, &SpecError{Field: field + ".containerDisk", Msg: err.Error()}
		}
	}
	format, err := ContainerDiskFormat(p)
	if err != nil {
		return source{}, &SpecError{Field: field + ".containerDisk", Msg: err.Error()}
	}
	return source{path: p, format: format, ephemeral: true}, nil
}
