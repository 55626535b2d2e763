#!/usr/bin/env bash
# Soft-RoCE test (docs/qemu-test.md "qemu-rxe"): boots Debian 12's kernel in
# QEMU (TCG) from a busybox initramfs with rdma_rxe and Debian's rdma-core
# userspace. The guest's first NIC is cabled by `-netdev dgram` (one
# Ethernet frame per UDP datagram on 127.0.0.1) to roce_ud_peer on the host;
# its second NIC (user networking) carries only the TCP exchange of
# addresses, through a hostfwd on 127.0.0.1. The guest runs
# `ibv_ud_pingpong` as the server; roce_ud_peer plays the client with the
# project's RoCEv2 codec and writes a pcap that tshark must decode as
# InfiniBand with nothing malformed.
#
#   test/qemu/rxe.sh <path to roce_ud_peer>
#
# Environment: as run.sh (OPENIB_CACHE, OPENIB_QEMU_KERNEL,
# OPENIB_QEMU_TIMEOUT, OPENIB_QEMU_ACCEL, OPENIB_QEMU_KEEP_LOG), and
#   OPENIB_RXE_SIZE       ud_pingpong message size (default 512)
#   OPENIB_RXE_ITERS      ud_pingpong iterations (default 100)
#   OPENIB_RXE_KEEP_PCAP  if set, copy the capture to this path
set -euo pipefail

peer_bin=${1:?usage: $0 <path to roce_ud_peer>}
cache=${OPENIB_CACHE:-/var/cache/openib}/qemu
vm_timeout=${OPENIB_QEMU_TIMEOUT:-300}
accel=${OPENIB_QEMU_ACCEL:-tcg}
size=${OPENIB_RXE_SIZE:-512}
iters=${OPENIB_RXE_ITERS:-100}
# virtio-net and rdma_rxe (ib_core, ib_uverbs, the UDP tunnel modules) and
# rdma_ucm for the rdmacm tools; dependencies come from modules.dep. rxe
# computes its ICRC with the crypto API's "crc32", which the kernel would
# otherwise modprobe on demand (there is no modprobe in the guest).
modules=(crc32_generic crc32-pclmul virtio_pci virtio_net rdma_rxe ib_uverbs rdma_ucm)
# Debian's rdma-core userspace, copied from the host (scripts/setup.sh
# installs these packages; checked against dpkg below).
guest_bins=(
  /usr/bin/ibv_devinfo /usr/bin/ibv_ud_pingpong /usr/bin/ibv_rc_pingpong
  /usr/bin/rping /usr/bin/udaddy /usr/bin/mckey
  /usr/bin/ib_send_lat /usr/bin/ib_send_bw /usr/bin/ib_write_bw
  /usr/sbin/ip /usr/bin/rdma
)
guest_pkgs=(libibverbs1 ibverbs-providers ibverbs-utils librdmacm1 rdmacm-utils perftest iproute2)
provider=/usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav34.so
guest_mac=52:54:00:12:34:56
oob_mac=52:54:00:12:34:57
peer_mac=02:00:00:00:00:01

qemu_test_tag=qemu-rxe
# shellcheck source=test/qemu/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

work=$(mktemp -d /tmp/openib-rxe.XXXXXX)
vm_pid=""
peer_pid=""
trap cleanup_vm_and_peer EXIT
trap 'exit 130' INT TERM

require_tools qemu-system-x86_64 dpkg-deb depmod cpio gzip ldd tshark python3 dpkg-query
[[ -x $peer_bin ]] || die "$peer_bin is not an executable"
require_packages "${guest_pkgs[@]}"

# Three free ports on 127.0.0.1: QEMU's dgram end, ours, and the hostfwd.
read -r port_qemu port_peer port_tcp < <(free_ports udp udp tcp)

# --- 1. the kernel package (lib.sh) ---------------------------------------
setup_kernel

# --- 2. the initramfs --------------------------------------------------------
root=$work/root
initramfs_skeleton "$root"
initramfs_modules "$root" "${modules[@]}"
initramfs_rxe "$root" "$provider" "${guest_bins[@]}"

# /init: lib.sh sets up the NICs and rxe0 and finds its GID; then the test.
rxe_init_setup "$root/init"
echo "rdma link show" >>"$root/init"
rxe_init_gid "$root/init"
cat >>"$root/init" <<'EOF'
for g in $port/gids/*; do
  n=${g##*/}
  t=$(cat $port/gid_attrs/types/$n 2>/dev/null) && echo "OPENIB: gid $n $(cat $g) $t"
done
echo "OPENIB: RoCE v2 GID index ${gidx:-none}"
ibv_devinfo -d rxe0 -v | grep -E 'hca_id|transport|state|active_mtu|max_mtu|link_layer|phys_state|GID'
if [ -n "$gidx" ]; then
  echo "OPENIB: at $(cut -d' ' -f1 /proc/uptime)s: ibv_ud_pingpong -d rxe0 -g $gidx -s $SIZE -n $ITERS"
  ibv_ud_pingpong -d rxe0 -g "$gidx" -s "$SIZE" -n "$ITERS" 2>&1
  rc=$?
else
  rc=98
fi
echo "OPENIB: rxe0 counters: $(cd $port/hw_counters 2>/dev/null && for c in *; do printf '%s=%s ' $c $(cat $c); done)"
echo "OPENIB: done at $(cut -d' ' -f1 /proc/uptime)s"
echo "OPENIB-RXE-EXIT=$rc"
poweroff -f
EOF
chmod +x "$root/init"
initramfs_pack "$root" "$work/initramfs.gz"

# --- 3. the peer, then the VM --------------------------------------------------
pcap=$work/rxe.pcap
say "ports: dgram QEMU 127.0.0.1:$port_qemu <-> peer 127.0.0.1:$port_peer, exchange 127.0.0.1:$port_tcp"
timeout -k 5 "$vm_timeout" "$peer_bin" --tcp-port "$port_tcp" --local-port "$port_peer" \
  --remote-port "$port_qemu" --size "$size" --iters "$iters" --mac "$peer_mac" --guest-mac "$guest_mac" \
  --pcap "$pcap" --connect-timeout "$vm_timeout" >"$work/peer.log" 2>&1 &
peer_pid=$!

serial=$work/serial.log
start_rxe_vm "$serial" "$port_qemu" "$port_peer" "hostfwd=tcp:127.0.0.1:$port_tcp-:18515"
wait_vm_and_peer  # each side gets a grace period after the other (lib.sh)

# --- 4. verdict --------------------------------------------------------------
show_logs "$serial" "$pcap" roce_ud_peer

failures=0
((peer_rc == 0)) || fail "roce_ud_peer exit status $peer_rc"
grep -q "PINGPONG-COMPLETE iters=$iters size=$size" "$work/peer.log" || fail "peer: ping-pong incomplete"
grep -q "OPENIB-RXE-EXIT=0" "$work/console.log" || fail "guest: ibv_ud_pingpong did not exit 0"
grep -q "$iters iters in" "$work/console.log" || fail "guest: no '$iters iters in' line from ibv_ud_pingpong"

# The capture: every RoCEv2 frame (UDP port 4791) decodes as InfiniBand,
# none is malformed, and there is a request and a reply per iteration.
check_capture "$pcap" "$((2 * iters))" 8
end_checks
say "PASS: $iters ud_pingpong iterations of $size bytes with rxe, capture clean (total $((SECONDS - start))s)"
