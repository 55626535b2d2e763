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
cleanup() {
  local pid
  for pid in "$vm_pid" "$peer_pid"; do
    [[ -n $pid ]] || continue
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

require_tools qemu-system-x86_64 dpkg-deb depmod cpio gzip ldd tshark python3 dpkg-query
[[ -x $peer_bin ]] || die "$peer_bin is not an executable"
for p in "${guest_pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' ||
    die "package $p not installed (run scripts/setup.sh)"
done

# Three free ports on 127.0.0.1: QEMU's dgram end, ours, and the hostfwd.
read -r port_qemu port_peer port_tcp < <(python3 -c '
import socket
s = [socket.socket(socket.AF_INET, t) for t in (socket.SOCK_DGRAM, socket.SOCK_DGRAM, socket.SOCK_STREAM)]
for x in s: x.bind(("127.0.0.1", 0))
print(*[x.getsockname()[1] for x in s])')

# --- 1. the kernel package (lib.sh) ---------------------------------------
setup_kernel

# --- 2. the initramfs --------------------------------------------------------
root=$work/root
initramfs_skeleton "$root"
initramfs_modules "$root" "${modules[@]}"
for b in "${guest_bins[@]}"; do
  [[ -x $b ]] || die "$b missing"
  initramfs_binary "$root" "$b"
done
# The rxe provider libibverbs dlopens (by this path, named by rxe.driver).
initramfs_binary "$root" "$provider"
mkdir -p "$root/etc/libibverbs.d"
cp /etc/libibverbs.d/rxe.driver "$root/etc/libibverbs.d/"

cat >"$root/init" <<EOF
#!/bin/busybox sh
ROCE_MAC=$guest_mac
OOB_MAC=$oob_mac
PEER_MAC=$peer_mac
SIZE=$size
ITERS=$iters
EOF
cat >>"$root/init" <<'EOF'
/bin/busybox --install -s /bin
export PATH=/usr/sbin:/usr/bin:/bin
# Debian's busybox runs its own applets before PATH: iproute2's ip by path.
ip() { /usr/sbin/ip "$@"; }
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
echo "OPENIB: init at $(cut -d' ' -f1 /proc/uptime)s"
for m in $(cat /lib/modules/load-order); do
  insmod /lib/modules/$m || echo "OPENIB: insmod $m failed"
done
ifname() {  # the interface with MAC $1
  for d in /sys/class/net/*; do
    [ "$(cat $d/address)" = "$1" ] && { echo ${d##*/}; return; }
  done
}
roce=$(ifname $ROCE_MAC)
oob=$(ifname $OOB_MAC)
echo "OPENIB: RoCE NIC ${roce:-none}, exchange NIC ${oob:-none}"
ip link set lo up
ip link set "$oob" up
ip addr add 10.0.2.15/24 dev "$oob"
ip link set "$roce" up
ip addr add 198.18.80.2/24 dev "$roce"
ip neigh add 198.18.80.1 lladdr $PEER_MAC dev "$roce" nud permanent
rdma link add rxe0 type rxe netdev "$roce" || echo "OPENIB: rdma link add failed"
rdma link show
# The RoCE v2 GID of 198.18.80.2: ::ffff:198.18.80.2.
port=/sys/class/infiniband/rxe0/ports/1
gidx=""
for i in $(seq 1 50); do
  for g in $port/gids/*; do
    n=${g##*/}
    if [ "$(cat $g 2>/dev/null)" = 0000:0000:0000:0000:0000:ffff:c612:5002 ] &&
       [ "$(cat $port/gid_attrs/types/$n 2>/dev/null)" = "RoCE v2" ]; then
      gidx=$n; break 2
    fi
  done
  sleep 0.1
done
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
say "booting (accel $accel, limit ${vm_timeout}s)"
start=$SECONDS
timeout -k 5 "$vm_timeout" qemu-system-x86_64 \
  -accel "$accel" -M q35 -cpu max -smp 1 -m 512M \
  -display none -nodefaults -no-user-config -no-reboot \
  -netdev "dgram,id=roce,local.type=inet,local.host=127.0.0.1,local.port=$port_qemu,remote.type=inet,remote.host=127.0.0.1,remote.port=$port_peer" \
  -device "virtio-net-pci,netdev=roce,mac=$guest_mac,romfile=" \
  -netdev "user,id=oob,restrict=on,hostfwd=tcp:127.0.0.1:$port_tcp-:18515" \
  -device "virtio-net-pci,netdev=oob,mac=$oob_mac,romfile=" \
  -serial "file:$serial" \
  -kernel "$vmlinuz" -initrd "$work/initramfs.gz" \
  -append "console=ttyS0 panic=-1 quiet" \
  </dev/null >"$work/qemu.log" 2>&1 &
vm_pid=$!

# Whichever ends first, the other gets a grace period: the guest powers off
# once ud_pingpong returns, but if the peer failed the server may wait
# forever; the peer waits for replies that a dead guest never sends.
while kill -0 "$peer_pid" 2>/dev/null && kill -0 "$vm_pid" 2>/dev/null; do sleep 0.5; done
if kill -0 "$vm_pid" 2>/dev/null; then
  peer_rc=0
  wait "$peer_pid" || peer_rc=$?
  peer_pid=""
  say "peer finished after $((SECONDS - start))s, exit status $peer_rc"
  grace=$((SECONDS + (peer_rc == 0 ? 60 : 10)))
  while kill -0 "$vm_pid" 2>/dev/null && ((SECONDS < grace)); do sleep 0.5; done
  kill "$vm_pid" 2>/dev/null || true
fi
vm_rc=0
wait "$vm_pid" || vm_rc=$?
vm_pid=""
say "VM ran $((SECONDS - start))s, exit status $vm_rc"
if [[ -n $peer_pid ]]; then
  grace=$((SECONDS + 10))
  while kill -0 "$peer_pid" 2>/dev/null && ((SECONDS < grace)); do sleep 0.5; done
  kill "$peer_pid" 2>/dev/null || true
  peer_rc=0
  wait "$peer_pid" || peer_rc=$?
  peer_pid=""
  say "peer finished after $((SECONDS - start))s, exit status $peer_rc"
fi

# --- 4. verdict --------------------------------------------------------------
tr -d '\r' <"$serial" >"$work/console.log"
[[ -n ${OPENIB_QEMU_KEEP_LOG:-} ]] && cp "$work/console.log" "$OPENIB_QEMU_KEEP_LOG"
[[ -n ${OPENIB_RXE_KEEP_PCAP:-} && -f $pcap ]] && cp "$pcap" "$OPENIB_RXE_KEEP_PCAP"
echo "----- serial console -----"
cat "$work/console.log"
echo "----- QEMU -----"
cat "$work/qemu.log"
echo "----- roce_ud_peer -----"
cat "$work/peer.log"
echo "-----"

failures=0
fail() { echo "$qemu_test_tag: $*" >&2; failures=$((failures + 1)); }
((peer_rc == 0)) || fail "roce_ud_peer exit status $peer_rc"
grep -q "PINGPONG-COMPLETE iters=$iters size=$size" "$work/peer.log" || fail "peer: ping-pong incomplete"
grep -q "OPENIB-RXE-EXIT=0" "$work/console.log" || fail "guest: ibv_ud_pingpong did not exit 0"
grep -q "$iters iters in" "$work/console.log" || fail "guest: no '$iters iters in' line from ibv_ud_pingpong"

# The capture: every RoCEv2 frame (UDP port 4791) decodes as InfiniBand,
# none is malformed.
if [[ -s $pcap ]]; then
  total=$(tshark -n -r "$pcap" -T fields -e frame.number 2>/dev/null | wc -l)
  roce=$(tshark -n -r "$pcap" -Y 'udp.port == 4791' -T fields -e frame.number 2>/dev/null | wc -l)
  ib=$(tshark -n -r "$pcap" -Y infiniband -T fields -e frame.number 2>/dev/null | wc -l)
  bad=$(tshark -n -r "$pcap" -Y '_ws.malformed || _ws.expert.severity >= error' -T fields -e frame.number 2>/dev/null | wc -l)
  say "tshark: $total frames, $roce to/from UDP 4791, $ib decoded as InfiniBand, $bad malformed or in error"
  tshark -n -r "$pcap" 2>/dev/null | sed -n '1,8p'
  ((roce > 0 && ib == roce)) || fail "tshark: $ib of $roce RoCEv2 frames decoded as InfiniBand"
  ((bad == 0)) || fail "tshark: $bad frames malformed or in error"
  ((roce >= 2 * iters)) || fail "tshark: only $roce RoCEv2 frames (expected at least $((2 * iters)))"
else
  fail "no capture written"
fi
((vm_rc != 124 && vm_rc != 137)) || fail "VM did not power off within ${vm_timeout}s"
((failures == 0)) || die "$failures check(s) failed"
say "PASS: $iters ud_pingpong iterations of $size bytes with rxe, capture clean (total $((SECONDS - start))s)"
