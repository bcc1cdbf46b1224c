#!/usr/bin/env bash
# Builds the cluster-lite binaries (a real etcd, kube-apiserver, ... from Go
# modules) into OUT, default _build/clusterlite/bin of the repository.
# Every directory here is its own Go module, so the main module's go.mod
# never sees their dependencies. Go's build cache makes a rebuild of an
# unchanged binary cheap.
#
# By default KubeVirt's virt-controller, virt-api and kubevirt-manifests come
# from the committed module kubevirt/ (KubeVirt v1.6.0, its go.mod and go.sum).
# Two environment variables build another KubeVirt instead:
#
#   KUBEVIRT_VERSION=vX.Y.Z  a released KubeVirt from the Go module proxy,
#                            into OUT/../kubevirt-vX.Y.Z/bin
#   KUBEVIRT_SRC=DIR         a local KubeVirt checkout (a replace to DIR and
#                            its staging/src/kubevirt.io/{api,client-go}),
#                            into OUT/../kubevirt-src/bin
#
# For either, the module kubevirt/ is copied into a work folder
# (OUT/../work/kubevirt-...), its go.mod is generated there from that
# KubeVirt's own go.mod (its requirement and replace pins) and tidied, and
# the binaries are built from the copy; nothing under tools/ changes. The
# versioned bin folder also gets etcd and kube-apiserver (built into OUT as
# usual), so it is a whole --bin-dir for `clusterlite up`.
#
# VIRT_HANDLER=1 also builds KubeVirt's node side, virt-handler and
# virt-chroot, from the same KubeVirt (not yet run by `clusterlite up`; see
# kubevirt/VIRT-HANDLER.md). Their main packages are KubeVirt's own
# (kubevirt.io/kubevirt/cmd/...), kept in the module by its go.mod's tool
# directives.
#
# usage: [KUBEVIRT_VERSION=vX.Y.Z | KUBEVIRT_SRC=DIR] [VIRT_HANDLER=1] tools/clusterlite/build.sh [OUT]
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
out=${1:-$here/../../_build/clusterlite/bin}
mkdir -p "$out"
out=$(cd "$out" && pwd)
go=${GO:-go}

# The KubeVirt release of the committed module kubevirt/.
default_version=v1.6.0
# The package whose KubeVirtVersion is recorded in the KubeVirt CR status.
manifests_pkg=github.com/crashloop-harness/crashloop/tools/clusterlite/kubevirt/kubevirt-manifests/manifests

die() {
	echo "tools/clusterlite/build.sh: $*" >&2
	exit 1
}

version=${KUBEVIRT_VERSION:-}
src=${KUBEVIRT_SRC:-}
if [[ -n $version && -n $src ]]; then
	die "set KUBEVIRT_VERSION ($version) or KUBEVIRT_SRC ($src), not both"
fi
if [[ -n $version && ! $version =~ ^v[0-9]+\.[0-9]+\.[0-9]+$ ]]; then
	die "KUBEVIRT_VERSION=$version: want a released version vMAJOR.MINOR.PATCH, for example v1.6.1"
fi
if [[ -n $src ]]; then
	[[ -f $src/go.mod ]] || die "KUBEVIRT_SRC=$src: no go.mod there; want the root of a KubeVirt checkout"
	src=$(cd "$src" && pwd)
	for s in api client-go; do
		[[ -f $src/staging/src/kubevirt.io/$s/go.mod ]] ||
			die "KUBEVIRT_SRC=$src: no staging/src/kubevirt.io/$s/go.mod; want the root of a KubeVirt checkout"
	done
	[[ $(cd "$src" && "$go" mod edit -json | jq -r .Module.Path) == kubevirt.io/kubevirt ]] ||
		die "KUBEVIRT_SRC=$src: go.mod is not module kubevirt.io/kubevirt"
fi
# KubeVirt's own main packages, built as they are (kubevirt/go.mod keeps
# them as tool directives).
kubevirt_tools=()
case ${VIRT_HANDLER:-} in
'' | 0) ;;
1) kubevirt_tools=(virt-handler virt-chroot) ;;
*) die "VIRT_HANDLER=$VIRT_HANDLER: want 1 (also build virt-handler and virt-chroot), or 0 or empty (not)" ;;
esac
# The default release is the committed module, built as always.
[[ $version == "$default_version" ]] && version=

# build DIR PKG NAME OUT [LDFLAGS]: go build PKG of the module in DIR into OUT/NAME.
build() {
	local start=$SECONDS
	(cd "$1" && "$go" build -ldflags="${5:-}" -o "$4/$3" "$2")
	echo "built $4/$3 ($((SECONDS - start))s)" >&2
}

# apiserver_ldflags: the -ldflags of kube-apiserver, run in its module
# directory. Without them /version says v0.0.0-master and no major/minor.
apiserver_ldflags() {
	local v pkg=k8s.io/component-base/version
	v=$("$go" list -m -f '{{.Version}}' k8s.io/kubernetes)
	local minor=${v#v*.}
	minor=${minor%%.*}
	echo "-X $pkg.gitVersion=$v -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
}

build "$here/etcd" . etcd "$out"
build "$here/kube-apiserver" . kube-apiserver "$out" "$(cd "$here/kube-apiserver" && apiserver_ldflags)"

kubevirt_binaries=(virt-controller virt-api kubevirt-manifests)

# build_kubevirt DIR OUT [LDFLAGS]: the KubeVirt binaries of the module in DIR into OUT.
build_kubevirt() {
	local b
	for b in "${kubevirt_binaries[@]}"; do
		build "$1" "./$b" "$b" "$2" "${3:-}"
	done
	for b in "${kubevirt_tools[@]}"; do
		build "$1" "kubevirt.io/kubevirt/cmd/$b" "$b" "$2"
	done
}

if [[ -z $version && -z $src ]]; then
	build_kubevirt "$here/kubevirt" "$out"
	exit 0
fi

# served MODULE VERSION: whether the module proxy serves MODULE@VERSION
# (downloading it). The proxy's own words go to stderr when it does not.
served() {
	local js
	js=$("$go" mod download -json "$1@$2" 2>/dev/null) || true
	if [[ $(jq -r '.Error // empty' <<<"$js") != "" ]]; then
		echo "  $1@$2: $(jq -r .Error <<<"$js" | head -1)" >&2
		return 1
	fi
	[[ $(jq -r '.GoMod // empty' <<<"$js") != "" ]]
}

# staging_version MODULE: the version of KubeVirt's staging module MODULE
# (kubevirt.io/api or kubevirt.io/client-go) to use with release $version.
# It is $version when the proxy serves it; KubeVirt does not publish every
# patch release of these, so otherwise the highest served patch below it in
# the same minor release, with a warning (KUBEVIRT_SRC with a checkout of
# the tag builds the exact staging code).
staging_version() {
	local mod=$1 major minor patch
	IFS=. read -r major minor patch <<<"${version#v}"
	for ((p = patch; p >= 0; p--)); do
		if served "$mod" "v$major.$minor.$p"; then
			if ((p != patch)); then
				echo "warning: the module proxy does not serve $mod@$version; using $mod@v$major.$minor.$p" >&2
			fi
			echo "v$major.$minor.$p"
			return
		fi
	done
	die "the module proxy serves no $mod v$major.$minor.x at or below $version"
}

if [[ -n $version ]]; then
	name=kubevirt-$version
	if ! served kubevirt.io/kubevirt "$version"; then
		die "KUBEVIRT_VERSION=$version: the module proxy does not serve kubevirt.io/kubevirt@$version (message above)"
	fi
	upstream_mod=$("$go" mod download -json "kubevirt.io/kubevirt@$version" | jq -r .GoMod)
	upstream_root=
	record_version=$version
else
	name=kubevirt-src
	upstream_mod=$src/go.mod
	upstream_root=$src
	# git describe only when DIR is the top of its own git work tree (not,
	# say, an unpacked archive inside this repository).
	record_version=devel
	if [[ $(git -C "$src" rev-parse --show-toplevel 2>/dev/null) == "$src" ]]; then
		record_version=$(git -C "$src" describe --tags --always --dirty 2>/dev/null || echo devel)
	fi
fi

work=$out/../work/$name
bin=$out/../$name/bin
rm -rf "$work"
mkdir -p "$work" "$bin"
work=$(cd "$work" && pwd)
bin=$(cd "$bin" && pwd)

# The module's own code, without its v1.6.0 go.mod and go.sum.
for b in "${kubevirt_binaries[@]}"; do
	cp -a "$here/kubevirt/$b" "$work/"
done

modpath=$(cd "$here/kubevirt" && "$go" mod edit -json | jq -r .Module.Path)
godirective=$(cd "$here/kubevirt" && "$go" mod edit -json | jq -r .Go)
edits=(-module="$modpath" -go="$godirective")
# KubeVirt's main packages asked for, as tool directives (only then: a
# release's tidy then also resolves what they import).
for b in "${kubevirt_tools[@]}"; do
	edits+=(-tool="kubevirt.io/kubevirt/cmd/$b")
done

# KubeVirt's replace pins: the k8s.io staging modules at one Kubernetes
# release, openshift, ... A library's replaces bind only its own main
# module, so they are copied. Local paths are KubeVirt's staging folders:
# for a release they become requirements on the published modules below,
# for a checkout they point into it.
# (A separator that is not white space: read would merge empty fields.)
while IFS='|' read -r old oldv new newv; do
	if [[ $new == ./* || $new == ../* ]]; then
		case $old in
		kubevirt.io/api | kubevirt.io/client-go) ;;
		*) [[ -n $upstream_root ]] || die "kubevirt.io/kubevirt@$version replaces $old with its local folder $new, which the module proxy does not ship; build a checkout of the tag with KUBEVIRT_SRC=DIR instead" ;;
		esac
		[[ -n $upstream_root ]] || continue
		new=$upstream_root/${new#./}
		newv=
	fi
	edits+=(-replace="$old${oldv:+@$oldv}=$new${newv:+@$newv}")
done < <("$go" mod edit -json "$upstream_mod" |
	jq -r '.Replace // [] | .[] | [.Old.Path, (.Old.Version // ""), .New.Path, (.New.Version // "")] | join("|")')

if [[ -n $version ]]; then
	api=$(staging_version kubevirt.io/api)
	clientgo=$(staging_version kubevirt.io/client-go)
	edits+=(-require="kubevirt.io/kubevirt@$version" -require="kubevirt.io/api@$api" -require="kubevirt.io/client-go@$clientgo")
else
	none=v0.0.0-00010101000000-000000000000
	edits+=(-replace="kubevirt.io/kubevirt=$src")
	edits+=(-require="kubevirt.io/kubevirt@$none" -require="kubevirt.io/api@$none" -require="kubevirt.io/client-go@$none")
fi

start=$SECONDS
(
	cd "$work"
	printf 'module %s\n' "$modpath" >go.mod
	"$go" mod edit "${edits[@]}"
	"$go" mod tidy
)
echo "generated $work/go.mod for KubeVirt $record_version ($((SECONDS - start))s)" >&2

build_kubevirt "$work" "$bin" "-X $manifests_pkg.KubeVirtVersion=$record_version"
cp -a "$out/etcd" "$out/kube-apiserver" "$bin/"
echo "KubeVirt $record_version: $bin (clusterlite up --bin-dir $bin)" >&2
