#!/usr/bin/env bash
# Builds the cluster-lite binaries (a real etcd, kube-apiserver, ... from Go
# modules) into OUT, default _build/bin/clusterlite of the repository.
# Every directory here is its own Go module, so the main module's go.mod
# never sees their dependencies. Go's build cache makes a rebuild of an
# unchanged binary cheap.
#
# usage: tools/clusterlite/build.sh [OUT]
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
out=${1:-$here/../../_build/bin/clusterlite}
mkdir -p "$out"
out=$(cd "$out" && pwd)

# One line per binary: module directory (relative to this script), package
# in that module, binary name.
binaries=(
	"etcd . etcd"
	"kube-apiserver . kube-apiserver"
	"kubevirt ./virt-controller virt-controller"
	"kubevirt ./virt-api virt-api"
	"kubevirt ./kubevirt-manifests kubevirt-manifests"
)

for b in "${binaries[@]}"; do
	read -r dir pkg name <<<"$b"
	start=$SECONDS
	(cd "$here/$dir" && "${GO:-go}" build -o "$out/$name" "$pkg")
	echo "built $out/$name ($((SECONDS - start))s)" >&2
done
