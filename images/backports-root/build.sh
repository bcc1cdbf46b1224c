#!/usr/bin/env bash
# Makes the backports root: Debian bookworm (debootstrap --variant=minbase)
# with libvirt and QEMU from bookworm-backports (libvirt 11.3, QEMU 10.0),
# for the launcher's local path on the newer pair. The host's own libvirt
# and QEMU (Debian 12's 9.0 and 7.2) are not touched: a launcher on this
# pair runs in this root, entered with unshare and chroot
# (images/backports-root/enter.sh), the same binaries bind-mounted in.
#
#   images/backports-root/build.sh ROOT
#
# ROOT is made afresh unless ROOT/.crashloop-inputs holds the hash of this
# script (then nothing is done). Debian's archive is the only thing reached.
set -euo pipefail

root=${1:?usage: build.sh ROOT}
[ "$(realpath -m "$root")" != / ] || { echo "build.sh: refusing ROOT=/ (it is made afresh)" >&2; exit 2; }
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
here=$(cd "$(dirname "$0")" && pwd)
inputs=$(sha256sum <"$here/build.sh" | cut -c1-64)
if [ "$(cat "$root/.crashloop-inputs" 2>/dev/null || true)" = "$inputs" ]; then
	echo "$root is up to date (${inputs:0:12})"
	exit 0
fi
rm -rf "$root"
mkdir -p "$(dirname "$root")"
tmp=$(mktemp -d "$(dirname "$root")/backports-root.XXXXXX")
log=$tmp.log
trap 'rm -rf "$tmp" "$log"' EXIT
echo "making $root (debootstrap --variant=minbase bookworm, then libvirt and QEMU from bookworm-backports)"
debootstrap --variant=minbase bookworm "$tmp" "$mirror" >"$log" 2>&1 || { tail -20 "$log" >&2; exit 1; }
printf '%s\n' \
	"deb $mirror bookworm main" \
	"deb $mirror bookworm-updates main" \
	"deb $mirror bookworm-backports main" \
	'deb http://deb.debian.org/debian-security bookworm-security main' >"$tmp/etc/apt/sources.list"
# no service may start inside the root while packages install
printf '#!/bin/sh\nexit 101\n' >"$tmp/usr/sbin/policy-rc.d"
chmod +x "$tmp/usr/sbin/policy-rc.d"
cp /etc/resolv.conf "$tmp/etc/resolv.conf"
# libvirt's QEMU driver wants these users (libvirt-daemon-system would make them, with its daemons' set-up)
chroot "$tmp" sh -ec '
	groupadd --system --gid 64055 libvirt-qemu
	groupadd -f --system kvm
	useradd --system --uid 64055 --gid kvm --groups libvirt-qemu --home-dir /var/lib/libvirt --no-create-home \
		--shell /usr/sbin/nologin libvirt-qemu
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends -t bookworm-backports \
		qemu-system-x86 qemu-utils libvirt0 libvirt-daemon libvirt-daemon-driver-qemu libvirt-clients >/dev/null
	# what the host has beside its libvirt and libvirt runs at every driver start, so both pairs do the same
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends dmidecode >/dev/null
	# libvirtd in the root (the benchmark'"'"'s virsh create) runs QEMU as root, like the launcher'"'"'s own configuration
	printf "\nuser = \"root\"\ngroup = \"root\"\n" >>/etc/libvirt/qemu.conf
	mkdir -p /var/log/libvirt
	apt-get clean
	rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin
' >>"$log" 2>&1 || { tail -20 "$log" >&2; exit 1; }
chroot "$tmp" dpkg-query -W -f='${Package} ${Version}\n' libvirt0 qemu-system-x86
echo "$inputs" >"$tmp/.crashloop-inputs"
mv "$tmp" "$root"
rm -f "$log"
trap - EXIT
echo "made $root in ${SECONDS}s"
