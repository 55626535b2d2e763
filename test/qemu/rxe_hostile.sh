#!/usr/bin/env bash
# A hostile guest on ibd's RoCEv2 port (docs/qemu-test.md "qemu-rxe-hostile",
# issue 32): as qemu-rxe-cm, Debian's kernel in QEMU (TCG) with Linux's
# rdma_rxe, cabled by `-netdev dgram` to ibd's embedded simhca, whose port 1
# is an Ethernet (RoCEv2) port with ibd's netdev (roce0, 198.18.80.1/24);
# the host side runs in a network namespace of its own (sbg-hostile).
#
#  1. The guest's rping client connects to the host's rping server (Debian's,
#     over our librdmacm.so.1) and pings N times (-v: every ping's data).
#  2. While it runs, the guest reads the connection from `rdma res show qp`
#     (the host's QPN: rqpn; the PSN the host expects: sq-psn), raises its
#     NIC's MTU to 9000 and runs hostile_frames (hostile_frames.c) on the
#     NIC through an AF_PACKET socket: RoCEv2 with a bad ICRC, to a QPN
#     that does not exist, to the connection's QP from a foreign IP and
#     port, to QP0, at PSNs long past (duplicates), runts and malformed
#     headers, UDP 4791 garbage, giants (2,998, 8,190 and 9,014 bytes),
#     RoCEv2 for another IP, an ARP storm and an IPv6 ND storm (5,000 each).
#  3. Then the guest's rping server takes the host's rping client (a fresh
#     connection the other way, after the attack).
#
# Verdict: ibd is alive after the attack; both rpings' data, on both ends,
# are rping's N lines exactly (nothing hostile was delivered, nothing was
# lost); the guest's rping was still running when the attack ended; every
# class of hostile frame left the guest (its NIC's tx counter), and the
# counters moved by at least what was sent: simhca's Ethernet-port and
# data-path counters (logged by ibd's simhca at exit: bad ICRC,
# malformed, no QP, wrong addresses, duplicates), ibd's netdev counters
# (`ibdctl counters`: netdev.drop_rx_too_big, netdev.frames_in; no error on
# its raw QP), the CM's refusal of every forged REQ (a Primary Local Port
# GID that is not the frame's IP source: cm.port1.rej_foreign_gid, and no
# connect request but the guest's one rping reached the RDMA CM) and the
# cable's drop of the 9,014-byte frames; simhca's
# capture holds the hostile frames (UDP source ports 0xBA00..0xBAFF, the
# storms) while every frame of the good traffic decodes as InfiniBand,
# none malformed.
#
#   test/qemu/rxe_hostile.sh <build directory> <hostile_frames>
#
# Environment: as run.sh (OPENIB_CACHE, OPENIB_QEMU_KERNEL,
# OPENIB_QEMU_TIMEOUT, OPENIB_QEMU_ACCEL, OPENIB_QEMU_KEEP_LOG), and
#   OPENIB_RXE_HOSTILE_ITERS  the guest's rping count across the attack
#                             (default 5000: it must outlast the attack,
#                             or the frames aimed at its QPN find no QP)
#   OPENIB_RXE_KEEP_PCAP      if set, copy simhca's capture to this path
set -euo pipefail

build=$(cd "${1:?usage: $0 <build directory> <hostile_frames>}" && pwd)
hostile=$(realpath "${2:?usage: $0 <build directory> <hostile_frames>}")
unset LD_LIBRARY_PATH  # (as rxe_cm.sh: the guest's libraries are Debian's)
ns=sbg-hostile
qemu_test_tag=qemu-rxe-hostile

# --- 0. a network namespace of our own; the rest runs inside it ---------------
if [[ ${OPENIB_RXE_HOSTILE_NS:-} != "$ns" ]]; then
  if ip netns list | grep -qw "$ns"; then
    # Left over by a killed run (empty): ours to remove; in use: not.
    [[ -z $(ip netns pids "$ns" 2>/dev/null) ]] || { echo "$qemu_test_tag: FAILED: namespace $ns is in use" >&2; exit 1; }
    ip netns del "$ns"
  fi
  ip netns add "$ns"
  trap 'ip netns del "$ns" 2>/dev/null || true' EXIT
  ip -n "$ns" link set lo up
  rc=0
  OPENIB_RXE_HOSTILE_NS=$ns ip netns exec "$ns" "$0" "$@" || rc=$?
  exit "$rc"
fi

cache=${OPENIB_CACHE:-/var/cache/openib}/qemu
vm_timeout=${OPENIB_QEMU_TIMEOUT:-400}
accel=${OPENIB_QEMU_ACCEL:-tcg}
iters=${OPENIB_RXE_HOSTILE_ITERS:-5000}
post_iters=50  # the fresh connection after the attack (host -> guest)
size=64
modules=(crc32_generic crc32-pclmul virtio_pci virtio_net rdma_rxe ib_uverbs rdma_ucm)
guest_bins=(/usr/bin/rping /usr/sbin/ip /usr/bin/rdma)
guest_pkgs=(libibverbs1 ibverbs-providers ibverbs-utils librdmacm1 rdmacm-utils iproute2)
provider=/usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav34.so
guest_mac=52:54:00:12:34:56
oob_mac=52:54:00:12:34:57
peer_mac=""  # the guest ARPs for 198.18.80.1
host_guid=0x0002c90300000c00
host_mac=02:03:00:00:0c:01  # docs/simhca.md §16.1: 02, low 40 bits of GUID + 1

# What hostile_frames sends (its HOSTILE lines must say so).
declare -A expect_sent=(
  [bad_icrc]=200 [no_qp]=200 [bad_addr]=200 [qp0]=50 [old_psn]=100 [malformed]=200 [garbage]=200
  [giant_udp]=20 [giant_no_qp]=10 [giant_roce]=5 [giant_bad_icrc]=10 [giant_9014]=5 [not_our_ip]=50
  [forged_req]=40 [arp_storm]=5000 [nd_storm]=5000)

# shellcheck source=test/qemu/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
IBD=$build/src/ibd/ibd
IBDCTL=$build/src/tools/ibdctl
abi=$build/src/abi

work=$(mktemp -d /tmp/openib-rxe-hostile.XXXXXX)
vm_pid=""
peer_pid=""
ibd_pid=""
trap cleanup_vm_peer_ibd EXIT
trap 'exit 130' INT TERM

require_tools qemu-system-x86_64 dpkg-deb depmod cpio gzip ldd tshark python3 dpkg-query rping
[[ -x $IBD ]] || die "$IBD is not an executable"
[[ -x $IBDCTL ]] || die "$IBDCTL is not an executable"
[[ -x $hostile ]] || die "$hostile is not an executable"
! ldd "$hostile" >/dev/null 2>&1 || die "$hostile is not linked statically (the guest has no C library for it)"
require_packages "${guest_pkgs[@]}"

read -r port_qemu port_hca < <(python3 -c '
import socket
s = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(*[x.getsockname()[1] for x in s])')

# --- 1. the kernel, the initramfs ------------------------------------------------
setup_kernel
root=$work/root
initramfs_skeleton "$root"
initramfs_modules "$root" "${modules[@]}"
initramfs_rxe "$root" "$provider" "${guest_bins[@]}"
initramfs_libgcc "$root"
cp "$hostile" "$root/bin/hostile_frames"
rxe_init_setup "$root/init"
rxe_init_gid "$root/init"
cat >>"$root/init" <<EOF
HOST_MAC=$host_mac
POST_ITERS=$post_iters
EOF
cat >>"$root/init" <<'EOF'
echo "OPENIB: RoCE v2 GID index ${gidx:-none}"
dump() {  # dump <role> <rc>: rping's output between markers
  echo "OPENIB-RPING-$1-BEGIN"
  cat /tmp/rping.log
  echo "OPENIB-RPING-$1-END"
  cat /tmp/rping.err
  echo "OPENIB-RPING-$1-EXIT=$2"
}
nic() { cat /sys/class/net/$roce/statistics/$1; }
if [ -n "$gidx" ]; then
  # 1. the host's rping server listens already.
  echo "OPENIB: at $(cut -d' ' -f1 /proc/uptime)s: rping -c, $ITERS pings"
  timeout 600 rping -c -a 198.18.80.1 -v -C "$ITERS" >/tmp/rping.log 2>/tmp/rping.err &
  rp=$!
  # 2. the connection, as the guest's kernel knows it: the host's QPN
  # (rqpn) and the guest's next send PSN (sq-psn).
  qp=""
  for i in $(seq 1 600); do
    qp=$(rdma res show qp link rxe0/1 2>/dev/null | grep 'state RTS' | grep 'comm rping' | head -1)
    [ -n "$qp" ] && break
    kill -0 $rp 2>/dev/null || break
    sleep 0.1
  done
  echo "OPENIB-QP: $qp"
  rqpn=$(echo "$qp" | sed -n 's/.* rqpn \([0-9]*\) .*/\1/p')
  sqpsn=$(echo "$qp" | sed -n 's/.* sq-psn \([0-9]*\) .*/\1/p')
  if [ -n "$rqpn" ] && [ -n "$sqpsn" ]; then
    ip link set "$roce" mtu 9000
    tx0=$(nic tx_packets); txd0=$(nic tx_dropped)
    echo "OPENIB: at $(cut -d' ' -f1 /proc/uptime)s: hostile_frames $roce $HOST_MAC $rqpn $sqpsn"
    /bin/hostile_frames "$roce" "$HOST_MAC" "$rqpn" "$sqpsn"
    echo "OPENIB-HOSTILE-EXIT=$?"
    echo "OPENIB-NIC-TX $tx0 $(nic tx_packets) $txd0 $(nic tx_dropped)"
    if kill -0 $rp 2>/dev/null; then echo "OPENIB-RPING-OVERLAP=yes"; else echo "OPENIB-RPING-OVERLAP=no"; fi
    echo "OPENIB: at $(cut -d' ' -f1 /proc/uptime)s: attack over"
  else
    echo "OPENIB-HOSTILE-EXIT=97"  # no connection to attack
  fi
  wait $rp
  rc=$?
  echo "OPENIB: at $(cut -d' ' -f1 /proc/uptime)s: rping -c ended"
  dump CLIENT $rc
  ip link set "$roce" mtu 1500
  # The host's stack, behind ibd's raw QP and roce0, after the storms.
  ping -c 3 -W 5 198.18.80.1
  echo "OPENIB-PING-EXIT=$?"
  # 3. a fresh connection the other way: the host's rping client connects
  # after this marker.
  echo "OPENIB-RPING-SERVER-START"
  timeout 120 rping -s -a 198.18.80.2 -v -C "$POST_ITERS" >/tmp/rping.log 2>/tmp/rping.err
  dump SERVER $?
  echo "OPENIB: neighbours: $(ip neigh show dev "$roce")"
  echo "OPENIB: rxe0 counters: $(cd $port/hw_counters 2>/dev/null && for c in *; do [ $c = lifespan ] && continue; v=$(cat $c); [ "$v" != 0 ] && printf '%s=%s ' $c $v; done)"
else
  echo "OPENIB-HOSTILE-EXIT=98"
  echo "OPENIB-RPING-CLIENT-EXIT=98"
  echo "OPENIB-RPING-SERVER-EXIT=98"
fi
echo "OPENIB: done at $(cut -d' ' -f1 /proc/uptime)s"
poweroff -f
EOF
chmod +x "$root/init"
initramfs_pack "$root" "$work/initramfs.gz"

# --- 2. ibd, its netdev, the host's rping server -----------------------------
# (simhca at log level info, the last --log it is given: its counters at exit)
start_roce_ibd --simhca-arg=--log --simhca-arg=info

counters() { "$IBDCTL" --socket "$work/ibd.sock" counters; }
counter() {  # counter <file> <name>: a value from a saved `ibdctl counters` (-1: absent)
  awk -v k="$2" '$1 == k { print $2; found = 1 } END { if (!found) print -1 }' "$1"
}
counters >"$work/counters.before" || die "ibdctl counters"

host_side() {
  local rc=0
  timeout 500 rping -s -a 198.18.80.1 -v -C "$iters" >"$work/host-server.out" 2>"$work/host-server.err" || rc=$?
  echo "host rping server exit $rc"
  [[ $rc == 0 ]] || return 1
  for _ in $(seq 1200); do
    grep -qs OPENIB-RPING-SERVER-START "$serial" && break
    sleep 0.1
  done
  grep -qs OPENIB-RPING-SERVER-START "$serial" || { echo "the guest's server never started"; return 1; }
  sleep 2  # (the marker comes just before rping -s binds and listens)
  rc=0
  timeout 120 rping -c -a 198.18.80.2 -v -C "$post_iters" >"$work/host-client.out" 2>"$work/host-client.err" || rc=$?
  echo "host rping client exit $rc"
  return "$rc"
}
host_side >"$work/peer.log" 2>&1 &
peer_pid=$!
sleep 0.5

# --- 3. the VM ------------------------------------------------------------------
start_rxe_vm "$serial" "$port_qemu" "$port_hca" ""
wait_vm_and_peer

failures=0
ibd_alive=0
if kill -0 "$ibd_pid" 2>/dev/null && counters >"$work/counters.after"; then
  ibd_alive=1
else
  fail "ibd is not alive after the attack (or does not answer ibdctl)"
  : >"$work/counters.after"
fi
stop_roce_ibd  # (its capture is complete, and simhca's counters logged, once it exits)

# --- 4. verdict --------------------------------------------------------------
{
  echo "host rping server (stdout, stderr):"; cat "$work/host-server.out" "$work/host-server.err" 2>/dev/null | tail -5 || true
  echo "host rping client (stdout, stderr):"; cat "$work/host-client.out" "$work/host-client.err" 2>/dev/null | tail -5 || true
  echo "----- ibd (warnings and simhca's counters) -----"
  grep -E 'warn|error|simhca: (data path|ethernet|management)|exiting' "$work/ibd.log" | tail -40 || true
} >>"$work/peer.log"
# (rping -v's data lines would drown the rest: checked below, not shown.)
show_logs "$serial" "$pcap" "host side" | grep -Ev '^(server )?ping data: rdma-ping-[0-9]+: '
((ibd_rc == 0)) || fail "ibd exited with status $ibd_rc when stopped"
((peer_rc == 0)) || fail "host side exit status $peer_rc"

# rping -v's data (as rxe_cm.sh): "rdma-ping-N: " and then, to 63 bytes,
# 'A'..'z' in turn from 'A' + N % 58.
expected_data() {
  awk -v n="$1" 'BEGIN { for (i = 0; i < n; i++) { s = "rdma-ping-" i ": "; m = 63 - length(s)
    for (k = 0; k < m; k++) s = s sprintf("%c", 65 + (i + k) % 58); print s } }'
}
check_data() {  # check_data <what> <count> <prefix> <text>
  local got expected
  expected=$(expected_data "$2")
  got=$(sed -n "s/^$3//p" <<<"$4")
  if [[ $got == "$expected" ]]; then
    say "$1: $2 pings, data verified"
    return 0
  fi
  fail "$1: $(grep -c . <<<"$got") data lines, not rping's $2 (first difference: $(diff <(echo "$expected") <(echo "$got") | sed -n 2p))"
}
console=$work/console.log
guest_part() { sed -n "/^OPENIB-RPING-$1-BEGIN\$/,/^OPENIB-RPING-$1-END\$/p" "$console"; }
for role in CLIENT SERVER; do
  grep -q "OPENIB-RPING-$role-EXIT=0" "$console" || fail "guest: rping as the $role did not exit 0"
done
check_data "guest rping client across the attack" "$iters" "ping data: " "$(guest_part CLIENT)"
check_data "host rping server across the attack" "$iters" "server ping data: " "$(cat "$work/host-server.out" 2>/dev/null)"
check_data "guest rping server after the attack" "$post_iters" "server ping data: " "$(guest_part SERVER)"
check_data "host rping client after the attack" "$post_iters" "ping data: " "$(cat "$work/host-client.out" 2>/dev/null)"
grep -q '^OPENIB-PING-EXIT=0' "$console" || fail "the guest's ping to 198.18.80.1 after the attack failed"
grep -q '^OPENIB-RPING-OVERLAP=yes' "$console" ||
  fail "the guest's rping was not running any more when the attack ended (raise OPENIB_RXE_HOSTILE_ITERS)"

# What the guest sent: each class whole, and its NIC's counter.
grep -q '^OPENIB-HOSTILE-EXIT=0' "$console" || fail "hostile_frames did not exit 0 ($(grep -m1 '^OPENIB-HOSTILE-EXIT' "$console"))"
sent() { awk -v c="$1" '$1 == "HOSTILE" && $2 == c { print $3; found = 1 } END { if (!found) print 0 }' "$console"; }
for c in "${!expect_sent[@]}"; do
  [[ $(sent "$c") == "${expect_sent[$c]}" ]] || fail "hostile_frames sent $(sent "$c") frames of class $c, not ${expect_sent[$c]}"
done
total=$(sent total)
read -r _ tx0 tx1 _ _ < <(grep -m1 '^OPENIB-NIC-TX' "$console" || echo "x 0 0 0 0")
((tx1 - tx0 >= total && total > 0)) ||
  fail "the guest's NIC sent $((tx1 - tx0)) frames during the attack, fewer than hostile_frames's $total"
say "guest: hostile_frames sent $total frames ($(awk '$1 == "HOSTILE" && $2 == "arp_storm" { print $3 " ARP requests in " $5 " ms" }' "$console"), $(awk '$1 == "HOSTILE" && $2 == "nd_storm" { print $3 " neighbour solicitations in " $5 " ms" }' "$console")); its NIC's tx_packets +$((tx1 - tx0))"

# simhca's counters, logged at exit (docs/simhca.md §16.3, §12.8).
# simhca logs them when ibd closes the device (which resets them) and again
# when it exits: the largest value logged is the run's.
logged() {  # logged <line prefix> <counter label>
  { grep "$1" "$work/ibd.log" | grep -oE "$2 [0-9]+" | awk '{ print $NF }' | sort -n | tail -1; } || true
}
bad_icrc=$(logged 'simhca: ethernet:' 'bad ICRC'); bad_icrc=${bad_icrc:--1}
bad_addr=$(logged 'simhca: ethernet:' 'wrong addresses'); bad_addr=${bad_addr:--1}
malformed=$(logged 'simhca: data path:' 'malformed'); malformed=${malformed:--1}
no_qp=$(logged 'simhca: data path:' 'no qp'); no_qp=${no_qp:--1}
dups=$(logged 'simhca: data path:' 'duplicates'); dups=${dups:--1}
say "simhca: bad ICRC $bad_icrc, malformed $malformed, no QP $no_qp, wrong addresses $bad_addr, duplicates $dups"
at_least() {  # at_least <what> <value> <minimum>
  (($2 >= $3)) || fail "$1: $2, expected at least $3"
}
at_least "simhca bad ICRC" "$bad_icrc" $((expect_sent[bad_icrc] + expect_sent[giant_bad_icrc]))
at_least "simhca bad ICRC + malformed" $((bad_icrc + malformed)) \
  $((expect_sent[bad_icrc] + expect_sent[giant_bad_icrc] + expect_sent[malformed] + expect_sent[garbage] +
     expect_sent[giant_roce]))
at_least "simhca no QP" "$no_qp" $((expect_sent[no_qp] + expect_sent[giant_no_qp]))
at_least "simhca wrong addresses" "$bad_addr" $((expect_sent[bad_addr] + expect_sent[qp0]))
at_least "simhca duplicates" "$dups" "${expect_sent[old_psn]}"

# ibd's netdev: the giants for the host stack dropped as too big; the
# storms and the RoCEv2 for another IP reached roce0; its raw QP unharmed.
delta() { echo $(($(counter "$work/counters.after" "$1") - $(counter "$work/counters.before" "$1"))); }
if ((ibd_alive)); then
  too_big=$(delta netdev.drop_rx_too_big)
  frames_in=$(delta netdev.frames_in)
  raw_rx=$(logged 'simhca: ethernet:' 'received'); raw_rx=${raw_rx:--1}
  say "netdev: drop_rx_too_big +$too_big, frames_in +$frames_in of the $raw_rx frames simhca gave its raw QP; every netdev counter that moved: $(
    LC_ALL=C join -j1 <(grep '^netdev\.' "$work/counters.before" | LC_ALL=C sort) \
      <(grep '^netdev\.' "$work/counters.after" | LC_ALL=C sort) |
      awk '$3 != $2 { printf "%s %s->%s ", $1, $2, $3 }')"
  at_least "netdev.drop_rx_too_big" "$too_big" "${expect_sent[giant_udp]}"
  # The storms come faster than ibd takes the raw QP's 256 receive slots
  # back (more so on a busy host): what finds no slot simhca drops
  # (rx_no_wqe, as a NIC's full receive ring). At least one ring's worth
  # reaches roce0; every frame the raw QP took went to roce0 or is counted.
  at_least "netdev.frames_in" "$frames_in" 256
  qp_rx=$(delta netdev.qp_received)
  accounted=$((frames_in + too_big + $(delta netdev.drop_if_down) + $(delta netdev.tap_write_errors)))
  ((qp_rx == accounted && qp_rx == raw_rx)) ||
    fail "netdev: the raw QP took $qp_rx frames (simhca gave it $raw_rx), $accounted written or counted as dropped"
  [[ $(counter "$work/counters.after" netdev.qp_recv_errors) == 0 ]] || fail "ibd's raw QP had receive errors"
  # The forged REQs (a Primary Local Port GID that is not the frame's
  # source: the host's own address, a third host's): each refused by the
  # CM with REJ 12 and counted; none reached the RDMA CM, so none reached
  # the host's rping listener.
  forged=$(delta cm.port1.rej_foreign_gid)
  say "cm: rej_foreign_gid +$forged, cma.connect_requests +$(delta cma.connect_requests), cma.requests_refused +$(delta cma.requests_refused)"
  ((forged == expect_sent[forged_req])) ||
    fail "cm.port1.rej_foreign_gid: +$forged, expected +${expect_sent[forged_req]} (every forged REQ refused)"
  (($(delta cma.connect_requests) == 1)) ||
    fail "cma.connect_requests +$(delta cma.connect_requests): not only the guest's one rping connection"
fi
grep -q 'dropped a 9014-byte datagram' "$work/ibd.log" ||
  fail "the cable did not say it dropped the 9,014-byte frames"

# --- 5. the capture ------------------------------------------------------------
if [[ ! -s $pcap ]]; then
  fail "no capture written"
else
  hostile_f='udp.srcport >= 0xba00 && udp.srcport <= 0xbaff'
  good_f="udp.port == 4791 && !($hostile_f)"
  nframes() { tshark -n -r "$pcap" -Y "$1" -T fields -e frame.number 2>/dev/null | wc -l; }
  good=$(nframes "$good_f")
  good_ib=$(nframes "($good_f) && infiniband")
  good_bad=$(nframes "($good_f) && (_ws.malformed || _ws.expert.severity >= error)")
  roce_hostile=$(nframes "$hostile_f && udp.dstport == 4791")
  arp=$(nframes 'arp.opcode == 1 && arp.dst.proto_ipv4 == 198.18.80.1')
  nd=$(nframes 'icmpv6.type == 135 && icmpv6.nd.ns.target_address == fe80::3:ff:fe00:c01')
  giants=$(nframes 'frame.len >= 2998')
  say "tshark: good RoCEv2 $good ($good_ib InfiniBand, $good_bad malformed or in error); hostile RoCEv2 $roce_hostile, ARP requests $arp, neighbour solicitations $nd, frames of 2,998 bytes and more $giants"
  ((good >= 4 * iters && good_ib == good && good_bad == 0)) ||
    fail "tshark: the good connection's frames: $good, $good_ib InfiniBand, $good_bad malformed (expected at least $((4 * iters)), all InfiniBand, none malformed)"
  hostile_roce=0
  for c in bad_icrc no_qp bad_addr qp0 old_psn giant_no_qp giant_roce giant_bad_icrc not_our_ip forged_req; do
    hostile_roce=$((hostile_roce + ${expect_sent[$c]}))
  done
  at_least "tshark: hostile RoCEv2 frames" "$roce_hostile" "$hostile_roce"
  at_least "tshark: ARP requests for 198.18.80.1" "$arp" "${expect_sent[arp_storm]}"
  at_least "tshark: neighbour solicitations" "$nd" "${expect_sent[nd_storm]}"
  at_least "tshark: giants" "$giants" $((expect_sent[giant_udp] + expect_sent[giant_no_qp] + expect_sent[giant_roce] + expect_sent[giant_bad_icrc] +
    expect_sent[giant_9014]))
fi
end_checks
say "PASS: $total hostile frames from the guest counted and dropped, ibd alive, rping across the attack ($iters pings) and after it ($post_iters) with data verified (total $((SECONDS - start))s)"
