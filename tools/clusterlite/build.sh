#!/usr/bin/env bash
# Builds the cluster-lite binaries (a real etcd, kube-apiserver, ... from Go
# modules) into OUT, default _build/clusterlite/bin of the repository.
# Every directory here is its own Go module, so the main module's go.mod
# never sees their dependencies. Go's build cache makes a rebuild of an
# unchanged binary cheap.
#
# usage: tools/clusterlite/build.sh [OUT]
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
out=${1:-$here/../../_build/clusterlite/bin}
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

# ldflags_for NAME prints the -ldflags value for binary NAME, run in its
# module directory.
ldflags_for() {
	case $1 in
	kube-apiserver)
		# Without these /version says v0.0.0-master and no major/minor.
		local v pkg=k8s.io/component-base/version
		v=$("${GO:-go}" list -m -f '{{.Version}}' k8s.io/kubernetes)
		local minor=${v#v*.}
		minor=${minor%%.*}
		echo "-X $pkg.gitVersion=$v -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
		;;
	esac
}

for b in "${binaries[@]}"; do
	read -r dir pkg name <<<"$b"
	start=$SECONDS
	(cd "$here/$dir" && "${GO:-go}" build -ldflags="$(ldflags_for "$name")" -o "$out/$name" "$pkg")
	echo "built $out/$name ($((SECONDS - start))s)" >&2
done
