#!/usr/bin/env bash
# Builds the crashloop cloud guest, a small Debian 12 system with cloud-init,
# from Debian packages only, and packages it as a KubeVirt containerDisk:
#   OUT/cloud-guest.oci.tar              oci-archive, /disk/disk.qcow2 (107:107)
#   OUT/cloud-guest/disk/disk.qcow2      the same qcow2, extracted from the archive
#   OUT/cloud-guest/recipe.sha256        hash of this recipe (decides reuse)
#   OUT/images.json                      gains "localhost/crashloop/cloud-guest:latest"
# The disk boots under SeaBIOS and OVMF (GPT: BIOS boot partition with GRUB's
# core.img, an EFI system partition with GRUB's BOOTX64.EFI, ext4 root), logs
# to ttyS0, reads NoCloud (cidata) and ConfigDrive (config-2) disks, prints
# "HARNESS-GUEST-READY cloud-init-done" on ttyS0 after cloud-init's last stage
# and powers off on an ACPI power button (systemd-logind).
# It is assembled from files (no loop devices, no mounts): debootstrap into a
# folder, mkfs.ext4 -d, mkfs.vfat + mtools, sfdisk on the disk file, dd.
# A complete OUT whose recipe hash matches is reused; any change to a file in
# images/cloud-guest/ rebuilds it.
set -euo pipefail
out=${1:?usage: build.sh OUT_DIR}
here=$(cd "$(dirname "$0")" && pwd)
ref=${CLOUD_GUEST_REF:-localhost/crashloop/cloud-guest:latest}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
suite=bookworm
root_mib=${CLOUD_GUEST_ROOT_MIB:-2048}
# Debian's cloud kernel: small, virtio, IDE (ata_piix) and SCSI, but no AHCI,
# so a sata disk on q35 is not seen; linux-image-amd64 has everything (larger).
kernel_pkg=${CLOUD_GUEST_KERNEL:-linux-image-cloud-amd64}
# The images.json value: "folder" (cloud-guest/, what every launcher reads) or
# "oci-archive" (oci-archive:cloud-guest.oci.tar, for a launcher that reads
# containers/image transport references).
entry=${CLOUD_GUEST_ENTRY:-folder}
name=cloud-guest

# shellcheck source=../index.sh
. "$here/../index.sh"

case $entry in
folder) value=$name ;;
oci-archive) value="oci-archive:$name.oci.tar" ;;
*) echo "build.sh: CLOUD_GUEST_ENTRY=$entry: want folder or oci-archive" >&2; exit 2 ;;
esac

recipe=$(cd "$here" && find . -type f | LC_ALL=C sort | xargs sha256sum | sha256sum | cut -d' ' -f1)
if [[ -f "$out/$name.oci.tar" && -f "$out/$name/disk/disk.qcow2" \
	&& "$(cat "$out/$name/recipe.sha256" 2>/dev/null)" == "$recipe" ]]; then
	index_set "$out/images.json" "$ref" "$value"
	echo "cloud guest image: reusing $out/$name.oci.tar"
	exit 0
fi

for tool in debootstrap mkfs.ext4 mkfs.vfat mmd mcopy sfdisk grub-mkimage qemu-img buildah jq; do
	command -v "$tool" >/dev/null || { echo "build.sh: $tool is missing (make images installs it)" >&2; exit 1; }
done
[[ -f /usr/lib/grub/i386-pc/boot.img && -d /usr/lib/grub/x86_64-efi ]] \
	|| { echo "build.sh: GRUB's i386-pc and x86_64-efi modules are missing (grub-pc-bin, grub-efi-amd64-bin)" >&2; exit 1; }

start=$(date +%s)
mkdir -p "$out"
work=$(mktemp -d "$out/.$name.work.XXXXXX")
storage="$work/storage"
cleanup() {
	# buildah's private store is plain folders (vfs): nothing is mounted.
	if [[ -d "$storage" ]]; then
		buildah --root "$storage" --runroot "$work/run" --storage-driver vfs rm -a >/dev/null 2>&1 || true
	fi
	rm -rf "$work"
}
trap cleanup EXIT
rootfs="$work/root"

echo "cloud guest image: debootstrap $suite (minbase) from $mirror"
# debootstrap does not resolve virtual packages: python3-cryptography's
# python3-cffi-backend-api-* come from python3-cffi-backend, named here.
debootstrap --variant=minbase \
	--include="$kernel_pkg,systemd-sysv,udev,dbus,cloud-init,python3-cffi-backend,busybox" \
	"$suite" "$rootfs" "$mirror" >"$work/debootstrap.log" 2>&1 \
	|| { tail -n 30 "$work/debootstrap.log" >&2; echo "build.sh: debootstrap failed" >&2; exit 1; }
# debootstrap exits 0 even when packages stay unconfigured.
broken=$(dpkg-query --admindir="$rootfs/var/lib/dpkg" -W -f '${db:Status-Abbrev} ${Package}\n' | awk '$1 != "ii" {print $2}')
[[ -z "$broken" ]] || { grep -B2 -A6 'error processing' "$rootfs/debootstrap/debootstrap.log" | tail -n 30 >&2 || true
	echo "build.sh: debootstrap left packages unconfigured:" $broken >&2; exit 1; }

kernel=$(cd "$rootfs/boot" && ls vmlinuz-* | sort -V | tail -n1)
kver=${kernel#vmlinuz-}
[[ -f "$rootfs/boot/initrd.img-$kver" ]] || { echo "build.sh: no initramfs for $kver in the root" >&2; exit 1; }
uuid=$(cat /proc/sys/kernel/random/uuid)
cmdline="root=UUID=$uuid ro console=tty0 console=ttyS0,115200n8"

echo "cloud guest image: configuring the root (kernel $kver)"
echo "$name" >"$rootfs/etc/hostname"
printf '127.0.0.1\tlocalhost\n127.0.1.1\t%s\n::1\tlocalhost ip6-localhost ip6-loopback\n' "$name" >"$rootfs/etc/hosts"
printf 'UUID=%s\t/\text4\tdefaults,errors=remount-ro\t0\t1\n' "$uuid" >"$rootfs/etc/fstab"
printf 'deb %s %s main\n' "$mirror" "$suite" >"$rootfs/etc/apt/sources.list"
install -m 644 "$here/90-crashloop.cfg" "$rootfs/etc/cloud/cloud.cfg.d/90-crashloop.cfg"
install -m 644 "$here/ds-identify.cfg" "$rootfs/etc/cloud/ds-identify.cfg"
install -m 644 "$here/harness-guest-ready.service" "$rootfs/etc/systemd/system/harness-guest-ready.service"
install -D -m 644 "$here/wait-online-override.conf" \
	"$rootfs/etc/systemd/system/systemd-networkd-wait-online.service.d/crashloop.conf"
systemctl --root="$rootfs" --quiet enable harness-guest-ready.service systemd-networkd.service
# Nothing here has a clock worth syncing or packages to update at boot.
systemctl --root="$rootfs" --quiet mask apt-daily.timer apt-daily-upgrade.timer e2scrub_reap.service \
	e2scrub_all.timer fstrim.timer
mkdir -p "$rootfs/boot/grub"
cat >"$rootfs/boot/grub/grub.cfg" <<EOF
serial --unit=0 --speed=115200
terminal_input serial console
terminal_output serial console
set timeout=0
menuentry 'Debian GNU/Linux ($name, $kver)' {
	linux /boot/$kernel $cmdline
	initrd /boot/initrd.img-$kver
}
EOF
# A new machine-id on every boot of a copy; no image-time state.
: >"$rootfs/etc/machine-id"
rm -f "$rootfs/var/lib/dbus/machine-id"
rm -rf "$rootfs"/usr/share/{doc,man,info,lintian,linda}/* "$rootfs"/var/lib/apt/lists/* \
	"$rootfs"/var/cache/apt/*.bin "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/cache/debconf/*-old \
	"$rootfs"/var/log/* "$rootfs"/tmp/* "$rootfs"/var/tmp/* "$rootfs/debootstrap"
find "$rootfs/usr/share/locale" -mindepth 1 -maxdepth 1 ! -name locale.alias -exec rm -rf {} +

echo "cloud guest image: assembling the disk (GPT, BIOS boot, ESP, ext4 root of $root_mib MiB)"
# Layout in MiB: 0 GPT | 1 BIOS boot (core.img) | 2..18 ESP | 18.. root | 1 spare for the backup GPT.
disk="$work/disk.raw"
truncate -s $((18 + root_mib + 1))M "$disk"
sfdisk -q --no-reread --no-tell-kernel "$disk" <<EOF
label: gpt
start=1MiB, size=1MiB, type=21686148-6E49-704E-6F6E-744E65656446, name=bios
start=2MiB, size=16MiB, type=C12A7328-F81F-11D2-BA4B-00A0C93EC93B, name=esp
start=18MiB, size=${root_mib}MiB, type=0FC63DAF-8483-4772-8E79-3D69D8477DE4, name=root
EOF

mkfs.ext4 -q -F -L root -U "$uuid" -d "$rootfs" -E lazy_itable_init=1,lazy_journal_init=1 \
	"$work/root.ext4" "${root_mib}M"
dd if="$work/root.ext4" of="$disk" bs=1M seek=18 conv=notrunc,sparse status=none
rm -f "$work/root.ext4"

# Both GRUBs carry the same early config: find the root by its UUID and read
# its /boot/grub/grub.cfg. All modules are built in, so nothing is loaded from disk.
cat >"$work/early.cfg" <<EOF
search --no-floppy --fs-uuid --set=root $uuid
set prefix=(\$root)/boot/grub
configfile (\$root)/boot/grub/grub.cfg
EOF
mods=(part_gpt part_msdos ext2 search search_fs_uuid normal configfile linux boot serial terminal echo test gzio)
grub-mkimage -O x86_64-efi -p /boot/grub -c "$work/early.cfg" -o "$work/BOOTX64.EFI" "${mods[@]}" efi_gop
mkfs.vfat -n ESP -C "$work/esp.vfat" $((16 * 1024)) >/dev/null
mmd -i "$work/esp.vfat" ::/EFI ::/EFI/BOOT
mcopy -i "$work/esp.vfat" "$work/BOOTX64.EFI" ::/EFI/BOOT/BOOTX64.EFI
dd if="$work/esp.vfat" of="$disk" bs=1M seek=2 conv=notrunc status=none

# BIOS: what grub-bios-setup does for a GPT disk with a BIOS boot partition,
# written by hand because it wants a block device. boot.img's code goes in the
# MBR (the protective partition table stays), pointing at core.img's first
# sector; core.img's first sector (diskboot) lists where the rest lies.
grub-mkimage -O i386-pc -p /boot/grub -c "$work/early.cfg" -o "$work/core.img" "${mods[@]}" biosdisk
core_lba=2048
core_sectors=$((($(stat -c %s "$work/core.img") + 511) / 512))
((core_sectors <= 2048)) || { echo "build.sh: core.img ($core_sectors sectors) does not fit the BIOS boot partition" >&2; exit 1; }
le64() { printf "$(printf '\\x%02x' $(($1 & 255)) $(($1 >> 8 & 255)) $(($1 >> 16 & 255)) $(($1 >> 24 & 255)) 0 0 0 0)"; }
le64 $((core_lba + 1)) | dd of="$work/core.img" bs=1 seek=$((0x1f4)) conv=notrunc status=none
dd if="$work/core.img" of="$disk" bs=512 seek=$core_lba conv=notrunc status=none
cp /usr/lib/grub/i386-pc/boot.img "$work/boot.img"
le64 $core_lba | dd of="$work/boot.img" bs=1 seek=$((0x5c)) conv=notrunc status=none
# GRUB_BOOT_MACHINE_DRIVE_CHECK: always treat the boot drive as a hard disk.
printf '\x90\x90' | dd of="$work/boot.img" bs=1 seek=$((0x66)) conv=notrunc status=none
dd if="$work/boot.img" of="$disk" bs=440 count=1 conv=notrunc status=none

echo "cloud guest image: compressing the qcow2"
qemu-img convert -c -O qcow2 "$disk" "$work/disk.qcow2"
rm -f "$disk"

# The OCI image: buildah (Debian's, daemonless) in a private vfs store under
# the work folder, FROM scratch, the qcow2 at /disk/ owned by 107:107 (the
# qemu user KubeVirt runs as), committed straight to an oci-archive. The layer
# stays uncompressed (commit -D; push -D still gzips): the qcow2 is compressed.
echo "cloud guest image: writing the OCI archive"
bah() { buildah --root "$storage" --runroot "$work/run" --storage-driver vfs "$@"; }
ctr=$(bah from --quiet scratch)
bah add --quiet --chown 107:107 --chmod 0440 "$ctr" "$work/disk.qcow2" /disk/disk.qcow2
bah config --os linux --arch amd64 \
	--label org.opencontainers.image.title="crashloop cloud guest" \
	--label org.opencontainers.image.description="Debian $suite, kernel $kver, cloud-init; KubeVirt containerDisk" \
	"$ctr"
bah commit --quiet --rm -D "$ctr" "oci-archive:$work/$name.oci.tar:$ref" >/dev/null

# The folder entry is extracted from the archive itself: it is what a
# containerDisk consumer of the OCI image sees.
blob() { tar -xOf "$work/$name.oci.tar" "blobs/sha256/${1#sha256:}"; }
manifest=$(tar -xOf "$work/$name.oci.tar" index.json | jq -r '.manifests[0].digest')
read -r layer media < <(blob "$manifest" | jq -r '.layers[0] | "\(.digest) \(.mediaType)"')
case $media in
*.tar) unpack="cat" ;;
*.tar+gzip) unpack="gzip -dc" ;;
*.tar+zstd) unpack="zstd -dc" ;;
*) echo "build.sh: unexpected layer type $media in the archive" >&2; exit 1 ;;
esac
mkdir -p "$work/$name"
blob "$layer" | $unpack | tar -x -C "$work/$name"
cmp -s "$work/$name/disk/disk.qcow2" "$work/disk.qcow2" || { echo "build.sh: the archive's /disk/disk.qcow2 differs from the built one" >&2; exit 1; }
chmod 644 "$work/$name/disk/disk.qcow2"
echo "$recipe" >"$work/$name/recipe.sha256"

rm -rf "${out:?}/$name" "$out/$name.oci.tar"
mv "$work/$name.oci.tar" "$out/$name.oci.tar"
mv "$work/$name" "$out/$name"
index_set "$out/images.json" "$ref" "$value"
echo "cloud guest image: built $out/$name.oci.tar ($ref, kernel $kver," \
	"qcow2 $(du -m "$out/$name/disk/disk.qcow2" | cut -f1) MiB, archive $(du -m "$out/$name.oci.tar" | cut -f1) MiB," \
	"$(($(date +%s) - start)) s)"
