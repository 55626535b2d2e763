#!/usr/bin/env bash
# Soft-RoCE RC test (docs/qemu-test.md "qemu-rxe-rc"): Linux rxe's RC
# transport against simhca's. Boots Debian 12's kernel in QEMU (TCG) as
# rxe.sh does; the guest's first NIC is cabled by `-netdev dgram` (one
# Ethernet frame per UDP datagram on 127.0.0.1) to a simhca whose port 1 is
# an Ethernet (RoCEv2) port, started and driven through the HCA driver by
# roce_rc_peer. In one boot the guest runs Debian's `ibv_rc_pingpong --chk`
# twice: first as the server (roce_rc_peer the client, through a hostfwd),
# then as the client (roce_rc_peer the server, through a guestfwd to a
# socket on 127.0.0.1). roce_rc_peer verifies every byte; simhca's pcap must
# decode as InfiniBand with nothing malformed.
#
#   test/qemu/rxe_rc.sh <path to roce_rc_peer> <path to simhca>
#
# Environment: as run.sh (OPENIB_CACHE, OPENIB_QEMU_KERNEL,
# OPENIB_QEMU_TIMEOUT, OPENIB_QEMU_ACCEL, OPENIB_QEMU_KEEP_LOG), and
#   OPENIB_RXE_RC_SIZE    rc_pingpong message size (default 4096: 4 packets at MTU 1024)
#   OPENIB_RXE_RC_ITERS   rc_pingpong iterations per role (default 200)
#   OPENIB_RXE_KEEP_PCAP  if set, copy simhca's capture to this path
set -euo pipefail

peer_bin=${1:?usage: $0 <path to roce_rc_peer> <path to simhca>}
simhca_bin=${2:?usage: $0 <path to roce_rc_peer> <path to simhca>}
cache=${OPENIB_CACHE:-/var/cache/openib}/qemu
vm_timeout=${OPENIB_QEMU_TIMEOUT:-300}
accel=${OPENIB_QEMU_ACCEL:-tcg}
size=${OPENIB_RXE_RC_SIZE:-4096}
iters=${OPENIB_RXE_RC_ITERS:-200}
modules=(crc32_generic crc32-pclmul virtio_pci virtio_net rdma_rxe ib_uverbs)
guest_bins=(/usr/bin/ibv_devinfo /usr/bin/ibv_rc_pingpong /usr/sbin/ip /usr/bin/rdma)
guest_pkgs=(libibverbs1 ibverbs-providers ibverbs-utils iproute2)
provider=/usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav34.so
guest_mac=52:54:00:12:34:56
oob_mac=52:54:00:12:34:57
# simhca's port MAC: 02 and the low 40 bits of node GUID + 1 (docs/simhca.md
# §16.1); roce_rc_peer's default --guid 0x1234000000000000 gives this one.
peer_mac=02:00:00:00:00:01

qemu_test_tag=qemu-rxe-rc
# shellcheck source=test/qemu/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

work=$(mktemp -d /tmp/openib-rxe-rc.XXXXXX)
vm_pid=""
peer_pid=""
trap cleanup_vm_and_peer EXIT
trap 'exit 130' INT TERM

require_tools qemu-system-x86_64 dpkg-deb depmod cpio gzip ldd tshark python3 dpkg-query
[[ -x $peer_bin ]] || die "$peer_bin is not an executable"
[[ -x $simhca_bin ]] || die "$simhca_bin is not an executable"
require_packages "${guest_pkgs[@]}"

# Four free ports on 127.0.0.1: QEMU's dgram end, simhca's, the hostfwd and
# the guestfwd's target (roce_rc_peer's listening socket).
read -r port_qemu port_hca port_tcp port_listen < <(free_ports udp udp tcp tcp)

# --- 1. the kernel package (lib.sh) ---------------------------------------
setup_kernel

# --- 2. the initramfs --------------------------------------------------------
root=$work/root
initramfs_skeleton "$root"
initramfs_modules "$root" "${modules[@]}"
initramfs_rxe "$root" "$provider" "${guest_bins[@]}"

# /init: lib.sh sets up the NICs and rxe0 and finds its GID; then the test.
rxe_init_setup "$root/init"
rxe_init_gid "$root/init"
cat >>"$root/init" <<'EOF'
echo "OPENIB: RoCE v2 GID index ${gidx:-none}"
ibv_devinfo -d rxe0 -v | grep -E 'state|active_mtu|link_layer'
counters() {
  # The non-zero ones; "lifespan" is the counters' cache time (ms), not a counter.
  echo "OPENIB: rxe0 counters after $1: $(cd $port/hw_counters 2>/dev/null && for c in *; do [ $c = lifespan ] && continue; v=$(cat $c); [ "$v" != 0 ] && printf '%s=%s ' $c $v; done)"
}
# rc_pingpong --chk reports bad data by printing, not by its exit status.
pingpong() {  # pingpong <role> [server address]
  role=$1; shift
  # roce_rc_peer connects (through the hostfwd) only after this marker.
  [ $role = SERVER ] && echo "OPENIB-RC-SERVER-START"
  echo "OPENIB: at $(cut -d' ' -f1 /proc/uptime)s: ibv_rc_pingpong -d rxe0 -g $gidx -s $SIZE -n $ITERS --chk $*"
  ibv_rc_pingpong -d rxe0 -g "$gidx" -s "$SIZE" -n "$ITERS" --chk "$@" >/tmp/pp.log 2>&1
  rc=$?
  cat /tmp/pp.log
  grep -q 'invalid data' /tmp/pp.log && rc=97
  counters "the $role"
  echo "OPENIB-RC-$role-EXIT=$rc"
}
if [ -n "$gidx" ]; then
  # 1. rxe is the server; simhca's side connects through the hostfwd.
  pingpong SERVER
  # 2. rxe is the client; 10.0.2.100:18515 is the guestfwd to the host.
  pingpong CLIENT 10.0.2.100
else
  echo "OPENIB-RC-SERVER-EXIT=98"
  echo "OPENIB-RC-CLIENT-EXIT=98"
fi
echo "OPENIB: done at $(cut -d' ' -f1 /proc/uptime)s"
poweroff -f
EOF
chmod +x "$root/init"
initramfs_pack "$root" "$work/initramfs.gz"

# --- 3. the peer (it starts simhca), then the VM ------------------------------
pcap=$work/simhca.pcap
serial=$work/serial.log
say "ports: dgram QEMU 127.0.0.1:$port_qemu <-> simhca 127.0.0.1:$port_hca, hostfwd 127.0.0.1:$port_tcp, guestfwd -> 127.0.0.1:$port_listen"
timeout -k 5 "$vm_timeout" "$peer_bin" --simhca "$simhca_bin" --local-port "$port_hca" --remote-port "$port_qemu" \
  --tcp-port "$port_tcp" --listen-port "$port_listen" --size "$size" --iters "$iters" \
  --guest-mac "$guest_mac" --pcap "$pcap" --console "$serial" --timeout "$((vm_timeout - 10))" >"$work/peer.log" 2>&1 &
peer_pid=$!
# guestfwd's chardev connects when QEMU starts: the peer must listen first.
for _ in $(seq 1 150); do
  grep -q 'READY' "$work/peer.log" 2>/dev/null && break
  kill -0 "$peer_pid" 2>/dev/null || break
  sleep 0.2
done
grep -q 'READY' "$work/peer.log" || { cat "$work/peer.log"; die "roce_rc_peer did not come up"; }

start_rxe_vm "$serial" "$port_qemu" "$port_hca" \
  "hostfwd=tcp:127.0.0.1:$port_tcp-:18515,guestfwd=tcp:10.0.2.100:18515-tcp:127.0.0.1:$port_listen"
wait_vm_and_peer  # each side gets a grace period after the other (lib.sh)

# --- 4. verdict --------------------------------------------------------------
show_logs "$serial" "$pcap" roce_rc_peer

failures=0
((peer_rc == 0)) || fail "roce_rc_peer exit status $peer_rc"
for role in CLIENT SERVER; do
  grep -q "RC-$role-COMPLETE iters=$iters size=$size" "$work/peer.log" || fail "peer: $role role incomplete"
  grep -q "OPENIB-RC-$role-EXIT=0" "$work/console.log" || fail "guest: ibv_rc_pingpong as the $role did not exit 0"
done
[[ $(grep -c "^$iters iters in" "$work/console.log") == 2 ]] || fail "guest: not two '$iters iters in' lines"
! grep -q 'invalid data' "$work/console.log" || fail "guest: rc_pingpong --chk found invalid data"

# The capture: every RoCEv2 frame decodes as InfiniBand, none malformed;
# at least the data packets of both roles (size/1024 per message, rounded up).
check_capture "$pcap" "$((2 * 2 * iters * ((size + 1023) / 1024)))" 6 'infiniband.bth.opcode == 17' 'RC ACKs'
end_checks
say "PASS: rc_pingpong with rxe both ways, $iters iterations of $size bytes each, every byte verified, capture clean (total $((SECONDS - start))s)"
