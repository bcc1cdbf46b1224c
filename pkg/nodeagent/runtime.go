package nodeagent

import "github.com/crashloop-harness/crashloop/pkg/launchrt"

// Runtime runs the compute container of a virt-launcher pod: the part of
// kubelet's container runtime (CRI) that the node agent needs, which is
// launchrt's seam, shared with the local controller. Two implementations:
// launchrt.Process runs our virt-launcher as a bare child process (the
// default), Podman runs the image the pod names as a real container.
type Runtime = launchrt.Runtime
