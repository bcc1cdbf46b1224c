package containerdisk

import (
	"context"
	"errors"
	"fmt"
	"os"

	storagetransport "go.podman.io/image/v5/storage"
	"go.podman.io/storage"
)

// fromStorage resolves name (an image name or ID, as the
// containers-storage transport reads it) in the local containers-storage.
// The store is opened for this call only and shut down after it.
func (r *Resolver) fromStorage(ctx context.Context, display, name, inImage string) (*Result, error) {
	opts, err := storage.DefaultStoreOptions()
	if err != nil {
		return nil, fmt.Errorf("image %q: reading the containers-storage configuration: %w", display, err)
	}
	if r.opts.StorageRoot != "" {
		opts.GraphRoot = r.opts.StorageRoot
	}
	if r.opts.StorageRunRoot != "" {
		opts.RunRoot = r.opts.StorageRunRoot
	}
	// Opening a store creates it: a machine where podman never ran has
	// none, and the image cannot be in it.
	if _, err := os.Stat(opts.GraphRoot); err != nil {
		return nil, fmt.Errorf("image %q: %w: there is no containers-storage at %s", display, ErrNotInStorage, opts.GraphRoot)
	}
	store, err := storage.GetStore(opts)
	if err != nil {
		return nil, fmt.Errorf("image %q: opening the containers-storage at %s: %w", display, opts.GraphRoot, err)
	}
	defer func() {
		if _, err := store.Shutdown(false); err != nil {
			r.log.Warn("closing the containers-storage", "root", opts.GraphRoot, "error", err)
		}
	}()
	ref, err := storagetransport.Transport.ParseStoreReference(store, name)
	if err != nil {
		return nil, fmt.Errorf("image %q: not a containers-storage reference: %w", display, err)
	}
	shown := name
	if named := ref.DockerReference(); named != nil {
		shown = named.String()
	}
	if _, _, err := storagetransport.ResolveReference(ref); err != nil {
		if errors.Is(err, storagetransport.ErrNoSuchImage) || errors.Is(err, storage.ErrImageUnknown) {
			return nil, fmt.Errorf("image %q: %w: the containers-storage at %s has no image %s (load it with `podman pull` or `podman load`)", display, ErrNotInStorage, opts.GraphRoot, shown)
		}
		return nil, fmt.Errorf("image %q: looking it up in the containers-storage at %s: %w", display, opts.GraphRoot, err)
	}
	return r.resolve(ctx, display, ref, inImage)
}
