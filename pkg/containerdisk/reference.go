package containerdisk

import (
	"fmt"
	"path/filepath"
	"strings"
)

// Transport names a containerDisk image may be read through: the local
// transports of containers/image. Registries are not reachable here, so
// "docker://" and the other remote transports are refused by name.
const (
	TransportOCI               = "oci"
	TransportOCIArchive        = "oci-archive"
	TransportDockerArchive     = "docker-archive"
	TransportContainersStorage = "containers-storage"
)

// Transports lists the supported transports, in the order error messages
// name them.
func Transports() []string {
	return []string{TransportOCI, TransportOCIArchive, TransportDockerArchive, TransportContainersStorage}
}

// unsupportedTransports are containers/image transports a reference may be
// written with that this package does not read.
var unsupportedTransports = map[string]string{
	"docker":        "it needs a registry",
	"docker-daemon": "it needs a Docker daemon",
	"dir":           "it is not a container image format KubeVirt reads",
	"sif":           "it is not a container image format KubeVirt reads",
	"tarball":       "it is not a container image format KubeVirt reads",
	"ostree":        "it is not a container image format KubeVirt reads",
}

// IsReference reports whether s is written as a containers/image transport
// reference (TRANSPORT:REST) rather than a folder or an image name. It is
// true for the supported transports and for the known unsupported ones, so
// that a "docker://…" value gets a clear refusal instead of being taken
// for a folder.
func IsReference(s string) bool {
	name, _, ok := strings.Cut(s, ":")
	if !ok {
		return false
	}
	for _, t := range Transports() {
		if name == t {
			return true
		}
	}
	_, known := unsupportedTransports[name]
	return known
}

// splitReference checks s and returns its transport and the rest, with a
// relative OCI or archive path made absolute against baseDir.
func splitReference(s, baseDir string) (transport, rest string, err error) {
	transport, rest, _ = strings.Cut(s, ":")
	if why, known := unsupportedTransports[transport]; known {
		return "", "", fmt.Errorf("image reference %q: transport %q is not supported here (%s); supported: %s", s, transport, why, strings.Join(Transports(), ", "))
	}
	switch transport {
	case TransportOCI, TransportOCIArchive, TransportDockerArchive:
		if rest == "" {
			return "", "", fmt.Errorf("image reference %q: transport %s needs a path", s, transport)
		}
		if !filepath.IsAbs(rest) && baseDir != "" {
			rest = filepath.Join(baseDir, rest)
		}
	case TransportContainersStorage:
		if rest == "" {
			return "", "", fmt.Errorf("image reference %q: transport %s needs an image name or ID", s, transport)
		}
	default:
		return "", "", fmt.Errorf("image reference %q has no transport: want TRANSPORT:REFERENCE with TRANSPORT one of %s", s, strings.Join(Transports(), ", "))
	}
	return transport, rest, nil
}
