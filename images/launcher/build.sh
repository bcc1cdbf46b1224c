#!/usr/bin/env bash
# Builds the virt-launcher container image with buildah from Debian packages
# only, and reuses it when it is up to date.
#
#   images/launcher/build.sh BIN_DIR BUILD_DIR
#
# BIN_DIR holds the virt-launcher that `make build` made; BUILD_DIR is the
# build folder (_build). The base is Debian bookworm made with
# `debootstrap --variant=minbase` and imported once as
# localhost/crashloop/debian-base:bookworm. The image carries a label with a
# hash of its inputs (the launcher binary, this script, the Containerfile and
# the base image's ID); when the image present has the same hash nothing is
# built, so CI builds it once. Podman's store must use the overlay driver
# (vfs copies the image per container and changes file ctimes, which throws
# libvirt's capability cache away on every launch): the user's configuration
# is used when it does; otherwise the image is kept in an overlay store of
# its own under BUILD_DIR/containers, named by
# BUILD_DIR/containers/storage.conf (export CONTAINERS_STORAGE_CONF=... to
# use it).
#
# LIBVIRT_PAIR=backports builds the image with libvirt 11.3 and QEMU 10.0
# from bookworm-backports instead of Debian 12's 9.0 and 7.2, tagged
# localhost/crashloop/virt-launcher:backports unless IMAGE says otherwise
# (the default image and the suites keep Debian 12's pair).
set -euo pipefail

bin_dir=${1:?usage: build.sh BIN_DIR BUILD_DIR}
build_dir=${2:?usage: build.sh BIN_DIR BUILD_DIR}
here=$(cd "$(dirname "$0")" && pwd)
pair=${LIBVIRT_PAIR:-debian}
case "$pair" in
debian) image=${IMAGE:-localhost/crashloop/virt-launcher:latest} ;;
backports) image=${IMAGE:-localhost/crashloop/virt-launcher:backports} ;;
*) echo "build.sh: LIBVIRT_PAIR=$pair: allowed are debian and backports" >&2; exit 2 ;;
esac
base=localhost/crashloop/debian-base:bookworm
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
label=dev.crashloop.inputs

launcher=$bin_dir/virt-launcher
convert_part=$bin_dir/virt-launcher-convert
libvirt_part=$bin_dir/virt-launcher-libvirt
# KubeVirt mode's entry points, the instancetype expander and the hook runner (kubevirtmode/build.sh, make kubevirtmode)
kubevirt_mode=(virt-launcher-monitor virt-launcher-expand virt-launcher-hooks container-disk virt-tail)
for b in "$launcher" "$convert_part" "$libvirt_part" "${kubevirt_mode[@]/#/$bin_dir/}"; do
	[ -x "$b" ] || { echo "build.sh: $b is missing: run make build first" >&2; exit 1; }
done
mkdir -p "$build_dir"
build_dir=$(cd "$build_dir" && pwd)

# Storage: overlay, without touching the user's configuration. When the
# store podman uses (CONTAINERS_STORAGE_CONF or the default) is not overlay,
# the image goes to an overlay store of our own.
conf=$build_dir/containers/storage.conf
driver=$(podman info --format '{{.Store.GraphDriverName}}' 2>/dev/null || true)
if [ "$driver" != overlay ]; then
	if [ ! -f "$conf" ]; then
		mkdir -p "$build_dir/containers/storage" "$build_dir/containers/run"
		cat >"$conf" <<CONF
# written by images/launcher/build.sh: an overlay store for the launcher image
[storage]
driver = "overlay"
graphroot = "$build_dir/containers/storage"
runroot = "$build_dir/containers/run"
CONF
	fi
	export CONTAINERS_STORAGE_CONF=$conf
	echo "podman's store uses the '${driver:-unknown}' driver, not overlay: the launcher image goes to an overlay store of its own;"
	echo "  use it with: export CONTAINERS_STORAGE_CONF=$conf"
fi

# The base: Debian's archive through debootstrap, imported once.
if ! podman image exists "$base"; then
	echo "making the base image $base (debootstrap --variant=minbase bookworm)"
	root=$(mktemp -d "$build_dir/debootstrap.XXXXXX")
	trap 'rm -rf "$root"' EXIT
	debootstrap --variant=minbase bookworm "$root" "$mirror" >"$root.log" 2>&1 ||
		{ tail -20 "$root.log" >&2; rm -f "$root.log"; exit 1; }
	rm -f "$root.log"
	rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
	tar -C "$root" --numeric-owner -c . | podman import --quiet \
		--change 'CMD ["/bin/bash"]' - "$base" >/dev/null
	rm -rf "$root"
	trap - EXIT
	echo "made $base in ${SECONDS}s"
fi

inputs=$( { sha256sum <"$launcher"; sha256sum <"$convert_part"; sha256sum <"$libvirt_part"; for b in "${kubevirt_mode[@]}"; do sha256sum <"$bin_dir/$b"; done; sha256sum <"$here/Containerfile"; sha256sum <"$here/build.sh";
	podman image inspect --format '{{.Id}}' "$base"; echo "$pair"; } | sha256sum | cut -c1-64)
current=$(podman image inspect --format "{{index .Labels \"$label\"}}" "$image" 2>/dev/null || true)
if [ "$current" = "$inputs" ]; then
	echo "$image is up to date ($label=${inputs:0:12})"
	exit 0
fi
old=$(podman image inspect --format '{{.Id}}' "$image" 2>/dev/null || true)

ctx=$(mktemp -d "$build_dir/image-context.XXXXXX")
trap 'rm -rf "$ctx"' EXIT
cp "$here/Containerfile" "$ctx/"
cp "$launcher" "$ctx/virt-launcher"
cp "$convert_part" "$ctx/virt-launcher-convert"
cp "$libvirt_part" "$ctx/virt-launcher-libvirt"
for b in "${kubevirt_mode[@]}"; do cp "$bin_dir/$b" "$ctx/$b"; done
# KubeVirt's file capability on the monitor (its DHCP server binds port 67
# as the image's user, 107); the Containerfile's COPY keeps it.
command -v setcap >/dev/null || { echo "build.sh: setcap is missing: install libcap2-bin (make image-deps)" >&2; exit 1; }
setcap cap_net_bind_service=+ep "$ctx/virt-launcher-monitor"
echo "building $image (libvirt pair $pair, $label=${inputs:0:12})"
start=$SECONDS
buildah bud --quiet --isolation chroot --layers --label "$label=$inputs" --build-arg "LIBVIRT_PAIR=$pair" \
	-f "$ctx/Containerfile" -t "$image" "$ctx" >/dev/null
# The image it replaces, untagged now (its package layer stays cached).
if [ -n "$old" ] && [ "$old" != "$(podman image inspect --format '{{.Id}}' "$image")" ]; then
	podman rmi "$old" >/dev/null 2>&1 || true
fi
read -r id size < <(podman image inspect --format '{{.Id}} {{.Size}}' "$image")
echo "built $image in $((SECONDS - start))s: ${id:0:12}, $size bytes"
