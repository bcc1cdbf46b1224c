#!/usr/bin/env bash
# Builds the KubeVirt-mode entry points of the launcher image into BIN_DIR:
#   virt-launcher-monitor  ours (cmd/virt-launcher-monitor of this module)
#   virt-launcher-expand   ours: instancetypes and preferences expanded with
#                          KubeVirt's code, for the converter stage
#   virt-launcher-hooks    ours: KubeVirt's hook sidecars applied to the
#                          converter's domain with KubeVirt's hook manager
#   sidecar-shim           KubeVirt v1.6.0's cmd/sidecars, the hook sidecar
#                          images' entrypoint, run by virt-launcher-hooks
#   smbios-onDefineDomain  KubeVirt v1.6.0's cmd/sidecars/smbios, the
#                          example-hook-sidecar image's onDefineDomain
#   virt-tail              KubeVirt v1.6.0's, built from kubevirt.io/kubevirt
#   container-disk         KubeVirt v1.6.0's, its C source in the module
#                          (cmd/container-disk-v2alpha/main.c), linked
#                          statically as KubeVirt's Bazel rule does
# and, for cluster-lite's node agent in KubeVirt mode (not in the image):
#   virt-handler-driver    ours (cmd/virt-handler-driver): virt-handler's
#                          part for one launcher pod
#
#   kubevirtmode/build.sh BIN_DIR
set -euo pipefail

out=${1:?usage: kubevirtmode/build.sh BIN_DIR}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
go=${GO:-go}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$here"
"$go" build -ldflags="-s -w" -o "$out/" ./cmd/virt-launcher-monitor ./cmd/virt-launcher-expand ./cmd/virt-launcher-hooks \
	./cmd/virt-handler-driver kubevirt.io/kubevirt/cmd/virt-tail
"$go" build -ldflags="-s -w" -o "$out/sidecar-shim" kubevirt.io/kubevirt/cmd/sidecars
"$go" build -ldflags="-s -w" -o "$out/smbios-onDefineDomain" kubevirt.io/kubevirt/cmd/sidecars/smbios
src=$("$go" list -m -f '{{.Dir}}' kubevirt.io/kubevirt)/cmd/container-disk-v2alpha/main.c
if [[ ! -x $out/container-disk || $src -nt $out/container-disk ]]; then
	${CC:-gcc} -static -O2 -o "$out/container-disk" "$src"
fi
