package realvms_test

import (
	"path/filepath"
	"syscall"

	"github.com/crashloop-harness/crashloop/functests/built"
	"github.com/crashloop-harness/crashloop/functests/launchharness"
	"github.com/crashloop-harness/crashloop/pkg/launcherapi"
)

// cloudGuestImage is the cloud guest's image reference (make cloud-image).
const cloudGuestImage = "localhost/crashloop/cloud-guest:latest"

// cloudGuestArchive is the cloud guest's OCI archive in the image folder
// of `make images`.
func cloudGuestArchive() string { return filepath.Join(built.ImageDir(), "cloud-guest.oci.tar") }

// ociImages is the suite's image folder, whose images.json maps the cloud
// guest to its oci-archive reference.
func ociImages() string { return filepath.Join(suiteDir, "images") }

// Launch is one virt-launcher process.
type Launch struct{ *launchharness.Launch }

// Start runs the launcher on manifest (YAML text) for the VMI
// namespace/name with the suite's capability cache and extra flags.
func Start(manifest, namespace, name string, flags ...string) *Launch {
	return &Launch{launchharness.Start(launchharness.Spec{Namespace: namespace, Name: name, Manifest: manifest,
		Args: launcherapi.Args{CacheDir: filepath.Join(suiteDir, "cache", "qemu-capabilities"), Extra: flags}})}
}

// Stop sends SIGTERM, the graceful stop.
func (l *Launch) Stop() { l.Signal(syscall.SIGTERM) }
