#!/usr/bin/env bash
# Soft-RoCE through the RDMA CM (docs/qemu-test.md "qemu-rxe-cm"): Linux's
# rdma_rxe, rdma_cm and ib_cm in a QEMU guest (Debian's kernel under TCG,
# Debian's rdma-core and rdmacm-utils in the initramfs) against ibd, by IP
# address, with Debian's unmodified rping on both ends (on the host
# through our librdmacm.so.1 and libibverbs.so.1).
#
# Everything on the host side runs in a network namespace of its own
# (sbg-rxe): ibd with its embedded simhca, whose port 1 is an Ethernet
# (RoCEv2) port with its netdev (--netdev roce0, a TAP holding
# 198.18.80.1/24), QEMU, whose first NIC is cabled by `-netdev dgram` (one
# frame per UDP datagram on the namespace's 127.0.0.1) to that port, and
# the host's rping. No address is configured by hand on either side
# beyond the interfaces' own: the guest finds 198.18.80.1 by ARP, which
# the host's kernel answers through the TAP and the raw QP; ibd finds the
# guest's MAC in the kernel's neighbour table.
#
#  1. the host's `rping -s` listens before the guest boots; the guest's
#     `rping -c -v -C N` connects to it (guest -> host);
#  2. then the guest runs `rping -s`, and the host's `rping -c -v -C N`
#     connects to it (host -> guest).
# rping -v prints each ping's data; every side's lines must be rping's N
# lines exactly. simhca's capture must decode as RoCEv2 with nothing
# malformed, and contain the CM's MADs (UD SENDs to QP1).
#
#   test/qemu/rxe_cm.sh <build directory>
#
# Environment: as run.sh (OPENIB_CACHE, OPENIB_QEMU_KERNEL,
# OPENIB_QEMU_TIMEOUT, OPENIB_QEMU_ACCEL, OPENIB_QEMU_KEEP_LOG), and
#   OPENIB_RXE_CM_ITERS   rping's count (-C) each way (default 100)
#   OPENIB_RXE_KEEP_PCAP  if set, copy simhca's capture to this path
set -euo pipefail

build=$(cd "${1:?usage: $0 <build directory>}" && pwd)
# meson's LD_LIBRARY_PATH names our libraries: the guest's (copied by what
# ldd says) must be Debian's. The host's rping gets ours below.
unset LD_LIBRARY_PATH
ns=sbg-rxe
qemu_test_tag=qemu-rxe-cm

# --- 0. a network namespace of our own; the rest runs inside it ---------------
if [[ ${OPENIB_RXE_CM_NS:-} != "$ns" ]]; then
  if ip netns list | grep -qw "$ns"; then
    # A namespace of that name with nothing in it is a leftover of a run
    # that was killed: ours to remove. One with processes is not.
    [[ -z $(ip netns pids "$ns" 2>/dev/null) ]] || { echo "$qemu_test_tag: FAILED: namespace $ns is in use" >&2; exit 1; }
    ip netns del "$ns"
  fi
  ip netns add "$ns"
  trap 'ip netns del "$ns" 2>/dev/null || true' EXIT
  ip -n "$ns" link set lo up
  rc=0
  OPENIB_RXE_CM_NS=$ns ip netns exec "$ns" "$0" "$@" || rc=$?
  exit "$rc"
fi

cache=${OPENIB_CACHE:-/var/cache/openib}/qemu
vm_timeout=${OPENIB_QEMU_TIMEOUT:-300}
accel=${OPENIB_QEMU_ACCEL:-tcg}
iters=${OPENIB_RXE_CM_ITERS:-100}
size=64  # (rxe_init_setup's SIZE; rping's default -S)
# rdma_ucm: the RDMA CM's character device for librdmacm (it brings rdma_cm
# and ib_cm); the rest as rxe.sh.
modules=(crc32_generic crc32-pclmul virtio_pci virtio_net rdma_rxe ib_uverbs rdma_ucm)
guest_bins=(/usr/bin/ibv_devinfo /usr/bin/rping /usr/sbin/ip /usr/bin/rdma)
guest_pkgs=(libibverbs1 ibverbs-providers ibverbs-utils librdmacm1 rdmacm-utils iproute2)
provider=/usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav34.so
guest_mac=52:54:00:12:34:56
oob_mac=52:54:00:12:34:57
peer_mac=""  # no permanent neighbour: the guest ARPs for 198.18.80.1
# simhca's port MAC: 02 and the low 40 bits of node GUID + 1 (docs/simhca.md
# §16.1).
host_guid=0x0002c90300000c00
host_mac=02:03:00:00:0c:01

# shellcheck source=test/qemu/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
IBD=$build/src/ibd/ibd
abi=$build/src/abi

work=$(mktemp -d /tmp/openib-rxe-cm.XXXXXX)
vm_pid=""
peer_pid=""
ibd_pid=""
stop_ibd() {  # SIGTERM, SIGKILL after 10 s; reaped
  [[ -n $ibd_pid ]] || return 0
  kill "$ibd_pid" 2>/dev/null || true
  for _ in $(seq 100); do kill -0 "$ibd_pid" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$ibd_pid" 2>/dev/null || true
  wait "$ibd_pid" 2>/dev/null || true
  ibd_pid=""
}
cleanup() {
  local pid
  for pid in "$peer_pid" "$vm_pid"; do
    [[ -n $pid ]] || continue
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  stop_ibd
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

require_tools qemu-system-x86_64 dpkg-deb depmod cpio gzip ldd tshark python3 dpkg-query rping ibv_devinfo
[[ -x $IBD ]] || die "$IBD is not an executable"
require_packages "${guest_pkgs[@]}"

read -r port_qemu port_hca < <(python3 -c '
import socket
s = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(*[x.getsockname()[1] for x in s])')

# --- 1. the kernel package (lib.sh) ---------------------------------------
setup_kernel

# --- 2. the initramfs --------------------------------------------------------
root=$work/root
initramfs_skeleton "$root"
initramfs_modules "$root" "${modules[@]}"
initramfs_rxe "$root" "$provider" "${guest_bins[@]}"
# rping's threads end by pthread_cancel/pthread_exit, for which glibc
# dlopens libgcc_s (ldd does not list it).
libgcc=$(ldconfig -p | awk '/libgcc_s.so.1 .*x86-64/ { print $NF; exit }')
[[ -n $libgcc ]] || die "no libgcc_s.so.1 on the host"
initramfs_binary "$root" "$libgcc"
rxe_init_setup "$root/init"
rxe_init_gid "$root/init"
cat >>"$root/init" <<'EOF'
echo "OPENIB: RoCE v2 GID index ${gidx:-none}"
# rping's output between markers (the verdict compares its data lines).
rping_run() {  # rping_run <role> <rping args>...
  role=$1; shift
  echo "OPENIB: at $(cut -d' ' -f1 /proc/uptime)s: rping $*"
  # (stderr apart: its messages would cut into a data line)
  timeout 120 rping "$@" -v -C "$ITERS" >/tmp/rping.log 2>/tmp/rping.err
  rc=$?
  echo "OPENIB-RPING-$role-BEGIN"
  cat /tmp/rping.log
  echo "OPENIB-RPING-$role-END"
  cat /tmp/rping.err
  echo "OPENIB-RPING-$role-EXIT=$rc"
}
if [ -n "$gidx" ]; then
  # 1. the host's rping server listens already.
  rping_run CLIENT -c -a 198.18.80.1
  # 2. the host's rping client connects after this marker.
  echo "OPENIB-RPING-SERVER-START"
  rping_run SERVER -s -a 198.18.80.2
  echo "OPENIB: neighbours: $(ip neigh show dev "$roce")"
  echo "OPENIB: rxe0 counters: $(cd $port/hw_counters 2>/dev/null && for c in *; do [ $c = lifespan ] && continue; v=$(cat $c); [ "$v" != 0 ] && printf '%s=%s ' $c $v; done)"
else
  echo "OPENIB-RPING-CLIENT-EXIT=98"
  echo "OPENIB-RPING-SERVER-EXIT=98"
fi
echo "OPENIB: done at $(cut -d' ' -f1 /proc/uptime)s"
poweroff -f
EOF
chmod +x "$root/init"
initramfs_pack "$root" "$work/initramfs.gz"

# --- 3. ibd, its netdev, the host's rping server -----------------------------
pcap=$work/simhca.pcap
serial=$work/serial.log
mkdir -p "$work/ibd.run"
"$IBD" --socket "$work/ibd.sock" --log info --run-dir "$work/ibd.run" \
  --cable "LOCAL=127.0.0.1:$port_hca,PEER=127.0.0.1:$port_qemu" --pcap "$pcap" \
  --simhca-arg=--link-layer --simhca-arg=ethernet --simhca-arg=--guid --simhca-arg=$host_guid \
  --netdev roce0 >"$work/ibd.log" 2>&1 </dev/null &
ibd_pid=$!
for _ in $(seq 300); do
  grep -qs "ibd: ready on" "$work/ibd.log" && break
  kill -0 "$ibd_pid" 2>/dev/null || break
  sleep 0.1
done
grep -qs "ibd: ready on" "$work/ibd.log" || { cat "$work/ibd.log"; die "ibd did not get ready"; }
[[ $(cat /sys/class/net/roce0/address 2>/dev/null) == "$host_mac" ]] ||
  die "roce0's MAC is '$(cat /sys/class/net/roce0/address 2>/dev/null)', not the port's $host_mac"
ip link set roce0 up
ip addr add 198.18.80.1/24 dev roce0
export OPENIB_SOCKET=$work/ibd.sock LD_LIBRARY_PATH=$abi:$build/src/lib
# The address becomes the port's RoCE v2 GID ::ffff:198.18.80.1 (ibd's netdev).
for _ in $(seq 50); do
  ibv_devinfo -v 2>/dev/null | grep -Eq 'GID\[ *[0-9]+\]:[[:space:]]+::ffff:198\.18\.80\.1, RoCE v2' && break
  sleep 0.1
done
ibv_devinfo -v | grep -E 'GID\['
ibv_devinfo -v | grep -Eq 'GID\[ *[0-9]+\]:[[:space:]]+::ffff:198\.18\.80\.1, RoCE v2' ||
  die "198.18.80.1 did not become a RoCE v2 GID of the port"
say "roce0 $host_mac 198.18.80.1/24; GID ::ffff:198.18.80.1 in the port's table"

# The host's two rpings, one after the other: the server now, the client
# when the guest says its server listens. (As one background job, so that
# wait_vm_and_peer can wait for it.)
host_side() {
  local rc=0
  timeout 200 rping -s -a 198.18.80.1 -v -C "$iters" >"$work/host-server.out" 2>"$work/host-server.err" || rc=$?
  echo "host rping server exit $rc"
  [[ $rc == 0 ]] || return 1
  for _ in $(seq 1200); do
    grep -qs OPENIB-RPING-SERVER-START "$serial" && break
    sleep 0.1
  done
  grep -qs OPENIB-RPING-SERVER-START "$serial" || { echo "the guest's server never started"; return 1; }
  sleep 2  # (the marker comes just before rping -s binds and listens)
  rc=0
  timeout 120 rping -c -a 198.18.80.2 -v -C "$iters" >"$work/host-client.out" 2>"$work/host-client.err" || rc=$?
  echo "host rping client exit $rc"
  return "$rc"
}
host_side >"$work/peer.log" 2>&1 &
peer_pid=$!
sleep 0.5

# --- 4. the VM ------------------------------------------------------------------
start_rxe_vm "$serial" "$port_qemu" "$port_hca" ""
wait_vm_and_peer  # each side gets a grace period after the other (lib.sh)

stop_ibd  # (its capture is complete once it exits)

# --- 5. verdict --------------------------------------------------------------
{
  echo "host rping server (stdout, stderr):"; cat "$work/host-server.out" "$work/host-server.err" 2>/dev/null || true
  echo "host rping client (stdout, stderr):"; cat "$work/host-client.out" "$work/host-client.err" 2>/dev/null || true
  echo "----- ibd (tail) -----"; tail -30 "$work/ibd.log"
} >>"$work/peer.log"
show_logs "$serial" "$pcap" "host side"

failures=0
((peer_rc == 0)) || fail "host side exit status $peer_rc"
# rping -v's data: "rdma-ping-N: " and then, to 63 bytes, 'A'..'z' in turn
# from 'A' + N % 58; the client prints "ping data: " and the data the server
# wrote back, the server "server ping data: " and what it read.
expected=$(awk -v n="$iters" 'BEGIN { for (i = 0; i < n; i++) { s = "rdma-ping-" i ": "; m = 63 - length(s)
  for (k = 0; k < m; k++) s = s sprintf("%c", 65 + (i + k) % 58); print s } }')
data_of() { sed -n "s/^$1//p"; }  # data_of <prefix>: rping's data lines without it
check_data() {  # check_data <what> <prefix> <text>
  local got
  got=$(data_of "$2" <<<"$3")
  [[ $got == "$expected" ]] && return 0
  fail "$1: $(grep -c . <<<"$got") data lines, not rping's $iters (first difference: $(diff <(echo "$expected") <(echo "$got") | sed -n 2p))"
}
guest_part() { sed -n "/^OPENIB-RPING-$1-BEGIN\$/,/^OPENIB-RPING-$1-END\$/p" "$work/console.log"; }
for role in CLIENT SERVER; do
  grep -q "OPENIB-RPING-$role-EXIT=0" "$work/console.log" || fail "guest: rping as the $role did not exit 0"
done
check_data "guest rping client (guest -> host)" "ping data: " "$(guest_part CLIENT)"
check_data "host rping server (guest -> host)" "server ping data: " "$(cat "$work/host-server.out" 2>/dev/null)"
check_data "guest rping server (host -> guest)" "server ping data: " "$(guest_part SERVER)"
check_data "host rping client (host -> guest)" "ping data: " "$(cat "$work/host-client.out" 2>/dev/null)"

# The capture: every RoCEv2 frame decodes as InfiniBand, none malformed;
# the CM's MADs (UD SENDs to QP1: REQ, REP, RTU, DREQ, DREP each way)
# among them, and at least the pings' SENDs.
check_capture "$pcap" "$((4 * iters))" 8 'infiniband.bth.destqp == 1' 'to QP1 (the CM)'
cm=$(tshark -n -r "$pcap" -Y 'infiniband.bth.destqp == 1' -T fields -e frame.number 2>/dev/null | wc -l)
((cm >= 10)) || fail "tshark: only $cm frames to QP1 (the CM's REQ, REP, RTU, DREQ, DREP both ways)"
end_checks
say "PASS: rping by the RDMA CM with Linux's rxe both ways, $iters pings of data verified on each side, capture clean (total $((SECONDS - start))s)"
