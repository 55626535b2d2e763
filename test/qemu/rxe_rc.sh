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
[[ -x $simhca_bin ]] || die "$simhca_bin is not an executable"
for p in "${guest_pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' ||
    die "package $p not installed (run scripts/setup.sh)"
done

# Four free ports on 127.0.0.1: QEMU's dgram end, simhca's, the hostfwd and
# the guestfwd's target (roce_rc_peer's listening socket).
read -r port_qemu port_hca port_tcp port_listen < <(python3 -c '
import socket
s = [socket.socket(socket.AF_INET, t) for t in (socket.SOCK_DGRAM, socket.SOCK_DGRAM, socket.SOCK_STREAM, socket.SOCK_STREAM)]
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
ip() { /usr/sbin/ip "$@"; }  # iproute2's, not busybox's applet
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

say "booting (accel $accel, limit ${vm_timeout}s)"
start=$SECONDS
timeout -k 5 "$vm_timeout" qemu-system-x86_64 \
  -accel "$accel" -M q35 -cpu max -smp 1 -m 512M \
  -display none -nodefaults -no-user-config -no-reboot \
  -netdev "dgram,id=roce,local.type=inet,local.host=127.0.0.1,local.port=$port_qemu,remote.type=inet,remote.host=127.0.0.1,remote.port=$port_hca" \
  -device "virtio-net-pci,netdev=roce,mac=$guest_mac,romfile=" \
  -netdev "user,id=oob,restrict=on,hostfwd=tcp:127.0.0.1:$port_tcp-:18515,guestfwd=tcp:10.0.2.100:18515-tcp:127.0.0.1:$port_listen" \
  -device "virtio-net-pci,netdev=oob,mac=$oob_mac,romfile=" \
  -serial "file:$serial" \
  -kernel "$vmlinuz" -initrd "$work/initramfs.gz" \
  -append "console=ttyS0 panic=-1 quiet" \
  </dev/null >"$work/qemu.log" 2>&1 &
vm_pid=$!

# Whichever ends first, the other gets a grace period (see rxe.sh).
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
echo "----- roce_rc_peer -----"
cat "$work/peer.log"
echo "-----"

failures=0
fail() { echo "$qemu_test_tag: $*" >&2; failures=$((failures + 1)); }
((peer_rc == 0)) || fail "roce_rc_peer exit status $peer_rc"
for role in CLIENT SERVER; do
  grep -q "RC-$role-COMPLETE iters=$iters size=$size" "$work/peer.log" || fail "peer: $role role incomplete"
  grep -q "OPENIB-RC-$role-EXIT=0" "$work/console.log" || fail "guest: ibv_rc_pingpong as the $role did not exit 0"
done
[[ $(grep -c "^$iters iters in" "$work/console.log") == 2 ]] || fail "guest: not two '$iters iters in' lines"
! grep -q 'invalid data' "$work/console.log" || fail "guest: rc_pingpong --chk found invalid data"

# The capture: every RoCEv2 frame decodes as InfiniBand, none malformed;
# at least the data packets of both roles (size/1024 per message, rounded up).
if [[ -s $pcap ]]; then
  total=$(tshark -n -r "$pcap" -T fields -e frame.number 2>/dev/null | wc -l)
  roce=$(tshark -n -r "$pcap" -Y 'udp.port == 4791' -T fields -e frame.number 2>/dev/null | wc -l)
  ib=$(tshark -n -r "$pcap" -Y infiniband -T fields -e frame.number 2>/dev/null | wc -l)
  bad=$(tshark -n -r "$pcap" -Y '_ws.malformed || _ws.expert.severity >= error' -T fields -e frame.number 2>/dev/null | wc -l)
  acks=$(tshark -n -r "$pcap" -Y 'infiniband.bth.opcode == 17' -T fields -e frame.number 2>/dev/null | wc -l)
  say "tshark: $total frames, $roce to/from UDP 4791, $ib decoded as InfiniBand ($acks RC ACKs), $bad malformed or in error"
  tshark -n -r "$pcap" 2>/dev/null | sed -n '1,6p'
  min=$((2 * 2 * iters * ((size + 1023) / 1024)))
  ((roce > 0 && ib == roce)) || fail "tshark: $ib of $roce RoCEv2 frames decoded as InfiniBand"
  ((bad == 0)) || fail "tshark: $bad frames malformed or in error"
  ((roce >= min)) || fail "tshark: only $roce RoCEv2 frames (expected at least $min)"
else
  fail "no capture written"
fi
((vm_rc != 124 && vm_rc != 137)) || fail "VM did not power off within ${vm_timeout}s"
((failures == 0)) || die "$failures check(s) failed"
say "PASS: rc_pingpong with rxe both ways, $iters iterations of $size bytes each, every byte verified, capture clean (total $((SECONDS - start))s)"
