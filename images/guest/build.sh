#!/usr/bin/env bash
# Builds the crashloop test guest from Debian packages into an image folder
# that virt-launcher's --image-dir reads:
#   OUT/images.json                      reference -> folder index
#   OUT/test-guest/boot/vmlinuz          Debian's linux-image kernel
#   OUT/test-guest/boot/initrd.img       busybox initramfs with our /init (and
#                                        udhcpc's script, bin/harness-dhcp)
#   OUT/test-guest/disk/disk.img         a 4 MiB raw disk for disk faults
# A complete OUT/test-guest is reused as it is; delete it to rebuild. Only
# OUT/test-guest and this entry of images.json are written: other images in
# OUT (the cloud guest) are kept.
set -euo pipefail
out=${1:?usage: build.sh OUT_DIR}
here=$(cd "$(dirname "$0")" && pwd)
ref=${GUEST_REF:-localhost/crashloop/test-guest:latest}

# shellcheck source=../index.sh
. "$here/../index.sh"

if [[ -f "$out/test-guest/boot/vmlinuz" && -f "$out/test-guest/boot/initrd.img" \
	&& "$out/test-guest/boot/initrd.img" -nt "$here/init" \
	&& "$out/test-guest/boot/initrd.img" -nt "$here/harness-dhcp" ]]; then
	index_set "$out/images.json" "$ref" test-guest
	echo "guest image: reusing $out/test-guest"
	exit 0
fi

work=$(mktemp -d)
tmp="$out.tmp.$$"
trap 'rm -rf "$work" "$tmp"' EXIT
kpkg=$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
[[ -n "$kpkg" ]] || { echo "build.sh: cannot find the kernel package behind linux-image-amd64 (run apt-get update)" >&2; exit 1; }
echo "guest image: fetching $kpkg"
(cd "$work" && chmod 777 . && apt-get download -q "$kpkg" >/dev/null)
dpkg-deb -x "$work"/linux-image-*.deb "$work/k"
kver=${kpkg#linux-image-}

mkdir -p "$work/root/bin" "$work/root/lib/modules" "$work/root/etc"
cp /bin/busybox "$work/root/bin/busybox"
cp "$here/init" "$work/root/init"
cp "$here/harness-dhcp" "$work/root/bin/harness-dhcp"
mods="$work/k/lib/modules/$kver/kernel"
for m in drivers/virtio/virtio.ko drivers/virtio/virtio_ring.ko drivers/virtio/virtio_pci_legacy_dev.ko \
	drivers/virtio/virtio_pci_modern_dev.ko drivers/virtio/virtio_pci.ko drivers/block/virtio_blk.ko \
	drivers/misc/pvpanic/pvpanic.ko drivers/misc/pvpanic/pvpanic-mmio.ko drivers/acpi/button.ko \
	drivers/input/evdev.ko net/core/failover.ko drivers/net/net_failover.ko drivers/net/virtio_net.ko; do
	src="$mods/$m"
	[[ -f "$src" ]] || src=$(ls "$src".* 2>/dev/null | head -n1)
	[[ -f "$src" ]] || { echo "build.sh: module $m missing from $kpkg" >&2; exit 1; }
	cp "$src" "$work/root/lib/modules/"
done

rm -rf "$tmp"
mkdir -p "$tmp/test-guest/boot" "$tmp/test-guest/disk"
cp "$work/k/boot/vmlinuz-$kver" "$tmp/test-guest/boot/vmlinuz"
(cd "$work/root" && find . | cpio -o -H newc --quiet | gzip -9) > "$tmp/test-guest/boot/initrd.img"
# A disk whose content is known: 4 MiB of a repeating pattern.
{ yes 'crashloop test disk' || true; } | head -c 4194304 > "$tmp/test-guest/disk/disk.img"
mkdir -p "$out"
rm -rf "$out/test-guest"
mv "$tmp/test-guest" "$out/test-guest"
rmdir "$tmp"
index_set "$out/images.json" "$ref" test-guest
echo "guest image: built $out ($ref, kernel $kver)"
