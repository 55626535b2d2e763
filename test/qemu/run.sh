#!/usr/bin/env bash
# Real-kernel VFIO test (docs/qemu-test.md): boots Debian 12's own kernel in
# QEMU (TCG, q35 + emulated Intel IOMMU + QEMU's "edu" PCI device) from a
# busybox initramfs that loads vfio-pci and runs openib-educheck against edu
# through /dev/vfio. Passes only if every expected VERIFIED line appears on
# the serial console and the tool's exit marker says 0.
#
#   test/qemu/run.sh <path to openib-educheck>
#
# Environment:
#   OPENIB_CACHE          cache root (default /var/cache/openib); the kernel
#                         .deb and its unpacked tree live in $OPENIB_CACHE/qemu
#   OPENIB_QEMU_KERNEL    kernel package to use (default: what linux-image-amd64
#                         depends on, else the newest .deb already cached)
#   OPENIB_QEMU_TIMEOUT   hard limit for the VM in seconds (default 240)
#   OPENIB_QEMU_ACCEL     QEMU accelerator (default tcg)
#   OPENIB_QEMU_KEEP_LOG  if set, copy the serial log to this path
set -euo pipefail

educheck=${1:?usage: $0 <path to openib-educheck>}
cache=${OPENIB_CACHE:-/var/cache/openib}/qemu
vm_timeout=${OPENIB_QEMU_TIMEOUT:-240}
accel=${OPENIB_QEMU_ACCEL:-tcg}
# Loaded in dependency order (resolved from modules.dep below).
modules=(irqbypass vfio vfio_iommu_type1 vfio-pci-core vfio-pci)
expected=(
  "VERIFIED: PCI config space id 1234:11e8"
  "VERIFIED: identification 0x010000ed"
  "VERIFIED: BAR0 mmap reads identification and liveness"
  "VERIFIED: liveness register"
  "VERIFIED: factorial 10! = 3628800"
  "VERIFIED: bus mastering enabled"
  "VERIFIED: interrupt raised via 0x60 arrived as MSI on the eventfd"
  "VERIFIED: dma RAM->device->RAM 4096 bytes intact through the IOMMU"
  "VERIFIED: completion MSI received on eventfd"
  "VERIFIED: DMA to an unmapped IOVA did not reach memory"
  # The guest kernel's report of that blocked write: the vIOMMU, not edu,
  # stopped it.
  "DMAR: [DMA Write"
  "OPENIB-EDUCHECK-EXIT=0"
)

qemu_test_tag=qemu-test
# shellcheck source=test/qemu/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

work=$(mktemp -d /tmp/openib-qemu.XXXXXX)
vm_pid=""
cleanup() {
  if [[ -n $vm_pid ]]; then
    kill "$vm_pid" 2>/dev/null || true
    wait "$vm_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

require_tools qemu-system-x86_64 dpkg-deb depmod cpio gzip ldd
[[ -x $educheck ]] || die "$educheck is not an executable"

# --- 1. the kernel package (lib.sh) ---------------------------------------
setup_kernel

# --- 2. the initramfs --------------------------------------------------------
root=$work/root
initramfs_skeleton "$root"
initramfs_modules "$root" "${modules[@]}"
# The tool with every library ldd lists and the dynamic loader.
initramfs_binary "$root" "$educheck" /bin/openib-educheck

cat >"$root/init" <<'EOF'
#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
for m in $(cat /lib/modules/load-order); do
  insmod /lib/modules/$m || echo "OPENIB: insmod $m failed"
done
addr=""
for d in /sys/bus/pci/devices/*; do
  if [ "$(cat $d/vendor)" = 0x1234 ] && [ "$(cat $d/device)" = 0x11e8 ]; then addr=${d##*/}; fi
done
if [ -z "$addr" ]; then
  echo "OPENIB: no edu device (1234:11e8) found"
  rc=99
else
  echo "OPENIB: edu at $addr, iommu group $(readlink /sys/bus/pci/devices/$addr/iommu_group)"
  /bin/openib-educheck --bind --device "vfio:$addr"
  rc=$?
fi
echo
echo "OPENIB-EDUCHECK-EXIT=$rc"
poweroff -f
EOF
chmod +x "$root/init"
initramfs_pack "$root" "$work/initramfs.gz"

# --- 3. boot -----------------------------------------------------------------
# q35 with an emulated VT-d: interrupt remapping (vfio-pci's MSI needs it,
# and intremap needs the split irqchip under KVM) and caching mode (so
# QEMU sees every map the guest makes). edu is a plain PCI device on pcie.0.
serial=$work/serial.log
say "booting (accel $accel, limit ${vm_timeout}s)"
start=$SECONDS
timeout -k 5 "$vm_timeout" qemu-system-x86_64 \
  -accel "$accel" -M q35,kernel-irqchip=split -cpu max -smp 1 -m 512M \
  -device intel-iommu,intremap=on,caching-mode=on -device edu \
  -display none -nodefaults -no-user-config -no-reboot \
  -serial "file:$serial" \
  -kernel "$vmlinuz" -initrd "$work/initramfs.gz" \
  -append "console=ttyS0 intel_iommu=on panic=-1 quiet" \
  </dev/null >"$work/qemu.log" 2>&1 &
vm_pid=$!
vm_rc=0
wait "$vm_pid" || vm_rc=$?
vm_pid=""
say "VM ran $((SECONDS - start))s, exit status $vm_rc"

# --- 4. verdict --------------------------------------------------------------
tr -d '\r' <"$serial" >"$work/console.log"
[[ -n ${OPENIB_QEMU_KEEP_LOG:-} ]] && cp "$work/console.log" "$OPENIB_QEMU_KEEP_LOG"
echo "----- serial console -----"
cat "$work/console.log"
echo "----- QEMU -----"
cat "$work/qemu.log"
echo "-----"
((vm_rc != 124 && vm_rc != 137)) || die "VM did not power off within ${vm_timeout}s"
missing=0
for line in "${expected[@]}"; do
  if ! grep -qF -- "$line" "$work/console.log"; then
    echo "qemu-test: missing: $line" >&2
    missing=$((missing + 1))
  fi
done
((missing == 0)) || die "$missing expected line(s) missing from the serial console"
say "PASS: ${#expected[@]} expected lines present"
