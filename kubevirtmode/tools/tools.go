//go:build tools

// Package tools keeps in go.mod the libraries of the KubeVirt v1.6.0
// programs the launcher image ships and that build.sh builds straight from
// kubevirt.io/kubevirt (cmd/virt-tail; and cmd/sidecars' sidecar-shim and
// cmd/sidecars/smbios, the hook sidecars virt-launcher-hooks runs), so that `go mod tidy` leaves them.
package tools

import (
	_ "github.com/nxadm/tail"
	_ "golang.org/x/sync/errgroup"
	_ "libvirt.org/go/libvirtxml"
)
