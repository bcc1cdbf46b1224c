#!/usr/bin/env bash
# Runs a command inside the backports root (images/backports-root/build.sh):
# in a mount namespace of its own (the host's mounts are not changed), with
# the root bound onto itself (a mount point, as libvirtd wants "/" to be),
# /proc, /sys, /dev, /tmp, the working directory and every --bind DIR
# bind-mounted at the same paths, then chroot. So the launcher binaries of
# `make build` and the guest images of `make images` are used where they
# are, with the root's libvirt and QEMU (the launcher's libvirt part loads
# the root's libvirt.so.0).
#
#   images/backports-root/enter.sh ROOT [--bind DIR]... COMMAND [ARG]...
#
# e.g. images/backports-root/enter.sh _build/backports-root _build/bin/virt-launcher examples/vmi-testguest.yaml
set -euo pipefail

root=${1:?usage: enter.sh ROOT [--bind DIR]... COMMAND [ARG]...}
shift
root=$(cd "$root" && pwd)
[ -f "$root/.crashloop-inputs" ] || { echo "enter.sh: $root is no backports root: make backports-root" >&2; exit 2; }
binds=(/tmp "$PWD")
while [ "${1:-}" = --bind ]; do
	binds+=("$(cd "${2:?--bind DIR}" && pwd)")
	shift 2
done
[ $# -gt 0 ] || { echo "usage: enter.sh ROOT [--bind DIR]... COMMAND [ARG]..." >&2; exit 2; }
# shellcheck disable=SC2016
exec unshare --mount --propagation private -- sh -ec '
	root=$1 n=$2; shift 2
	# the root a mount point of its own: libvirtd makes the mounts of a domain'"'"'s namespace private from "/"
	mount --bind "$root" "$root"
	for fs in /proc /sys /dev; do mount --rbind "$fs" "$root$fs"; done
	while [ "$n" -gt 0 ]; do
		mkdir -p "$root$1"; mount --bind "$1" "$root$1"; shift; n=$((n - 1))
	done
	cwd=$(pwd)
	exec chroot "$root" sh -c "cd \"\$0\" && exec \"\$@\"" "$cwd" "$@"
' sh "$root" "${#binds[@]}" "${binds[@]}" "$@"
