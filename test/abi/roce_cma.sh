#!/usr/bin/env bash
# The RDMA CM over RoCEv2 ports (docs/cma.md "RoCE", docs/arp.md "RoCE
# destinations"): Debian's unmodified rdmacm-utils over our librdmacm.so.1
# and libibverbs.so.1 between two ibds, each in a network namespace of its
# own (sbq1, sbq2) with its embedded simhca given an Ethernet port
# (--link-layer ethernet, distinct GUIDs so distinct MACs) and --netdev
# roce0 (198.18.93.1/24 and 198.18.93.2/24), the ports cabled by an
# Ethernet UDP cable over a veth pair between the namespaces (its own /30,
# more specific than the TAPs' /24). Test roce-cma (suites abi and
# debian-tools; root). What it shows:
#  - rping both ways, -v -C 10: each ping's data as sent on both sides
#    (the addresses resolved through the kernel's ARP on roce0, the
#    connection's GIDs the IPv4-mapped addresses' entries, the CM's MADs
#    on QP1 with a GRH, the QPs' address vectors with the neighbour's MAC);
#  - rping over IPv6 (fd00:93::/64 on roce0);
#  - ucmatose (10 RC connections, data both ways);
#  - udaddy (UD through SIDR): messages both ways, its datagrams IPv4
#    frames (the SIDR reply's address vector from the source address's
#    GID entry, not the link-local GID 0), read from ibd 1's capture;
#  - rping -q both ways (QPs the application moves with
#    rdma_init_qp_attr: the RTR's sgid_index the connection's GID entry);
#  - mckey: a receiver on each side, a sender in sbq1, IPv4 group
#    239.93.0.1 (no SA: the group's IP as the MGID), both receivers get
#    the datagrams; the kernel holds the group on roce0 (IGMP) while a
#    receiver runs and leaves it after; the frames go to the group's MAC.
#   roce_cma.sh IBD IBDCTL ABI_DIR
set -euo pipefail
IBD=$1 IBDCTL=$2 ABI=$3
work=$(mktemp -d "${TMPDIR:-/tmp}/roce-cma-XXXXXX")
ns1=sbq1 ns2=sbq2 veth=sbq$$
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do
    for _ in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
  done
  ip netns del "$ns1" 2>/dev/null || true
  ip netns del "$ns2" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*"
  for f in "$work"/1.log "$work"/2.log; do
    [[ -f $f ]] && { echo "--- $f (tail)"; tail -30 "$f"; }
  done
  exit 1
}
for t in rping ucmatose udaddy mckey tshark ip; do command -v "$t" >/dev/null || fail "$t not found (scripts/setup.sh installs rdmacm-utils)"; done
until_ok() {
  local n=$1
  shift
  for _ in $(seq "$n"); do "$@" && return 0; sleep 0.1; done
  return 1
}
libs=$ABI:$ABI/../lib
# inns N CMD...: CMD in namespace sbqN against that namespace's ibd, over our libraries.
inns() {
  local n=$1
  shift
  ip netns exec "sbq$n" env "LD_LIBRARY_PATH=$libs" "OPENIB_SOCKET=$work/$n.sock" "$@"
}
# A leftover of a killed run (the names are fixed).
ip netns del "$ns1" 2>/dev/null || true
ip netns del "$ns2" 2>/dev/null || true
ip netns add "$ns1"
ip netns add "$ns2"
ip link add "${veth}a" type veth peer name "${veth}b"
ip link set "${veth}a" netns "$ns1"
ip link set "${veth}b" netns "$ns2"
for n in 1 2; do ip -n "sbq$n" link set lo up; done
ip -n "$ns1" link set "${veth}a" mtu 9000 up
ip -n "$ns2" link set "${veth}b" mtu 9000 up
ip -n "$ns1" addr add 198.18.93.249/30 dev "${veth}a"
ip -n "$ns2" addr add 198.18.93.250/30 dev "${veth}b"

start() {  # start N LOCAL PEER GUID [IBD ARGS...]
  mkdir -p "$work/$1.run"
  ip netns exec "sbq$1" "$IBD" --socket "$work/$1.sock" --log info --run-dir "$work/$1.run" --state-dir none \
    --cable "LOCAL=$2:30093,PEER=$3:30093" --simhca-arg=--link-layer --simhca-arg=ethernet \
    --simhca-arg=--guid --simhca-arg="$4" --netdev roce0 "${@:5}" >"$work/$1.log" 2>&1 </dev/null &
  pids+=($!)
  until_ok 300 grep -qs "ibd: ready" "$work/$1.log" || fail "ibd $1 not ready"
}
# ibd 1's port's frames, both ways, for the checks at the end.
start 1 198.18.93.249 198.18.93.250 0x0002c90300000c00 --pcap "$work/1.pcap"
start 2 198.18.93.250 198.18.93.249 0x0002c90300000d00
has_tap() { ip -n "$1" link show roce0 >/dev/null 2>&1; }
for n in 1 2; do
  until_ok 100 has_tap "sbq$n" || fail "no roce0 in sbq$n"
  ip -n "sbq$n" addr add "198.18.93.$n/24" dev roce0
  ip -n "sbq$n" addr add "fd00:93::$n/64" dev roce0 nodad
  ip -n "sbq$n" link set roce0 up
done
gid_there() {  # gid_there N TEXT: ibv_devinfo lists TEXT as a RoCE v2 GID
  inns "$1" timeout 30 ibv_devinfo -v | grep -Eq "GID\[ *[0-9]+\]:[[:space:]]+$2, RoCE v2"
}
for n in 1 2; do
  until_ok 100 gid_there "$n" "::ffff:198.18.93.$n" || fail "ibd $n: no GID ::ffff:198.18.93.$n"
  until_ok 100 gid_there "$n" "fd00:93::$n" || fail "ibd $n: no GID fd00:93::$n"
done
until_ok 50 ip netns exec "$ns1" ping -c 1 -W 1 -q 198.18.93.2 >/dev/null || fail "no ping sbq1 -> sbq2"
# The first connection must find no neighbour entry yet: the RDMA CM's
# resolution makes the kernel ARP (the ping above made one: flushed).
for n in 1 2; do ip -n "sbq$n" neigh flush dev roce0; done
echo "ok: roce0 up in sbq1 and sbq2, the addresses RoCE v2 GIDs"

# ---- rping both ways --------------------------------------------------------------
# rping -v prints each ping's data ("rdma-ping-N: " and its rotating
# pattern): "ping data: ..." on the client, "server ping data: ..." on the
# server; the two must be the same ten lines.
rping_pair() {  # rping_pair SERVER CLIENT ADDR [RPING FLAG]
  local s=$1 c=$2 addr=$3 srv rc=0 out
  local -a f=("${@:4}")
  inns "$s" timeout 60 rping -s "${f[@]}" -a "$addr" -v -C 10 >"$work/rping-srv.out" 2>"$work/rping-srv.err" &
  srv=$!
  pids+=("$srv")
  sleep 1
  out=$(inns "$c" timeout 60 rping -c "${f[@]}" -a "$addr" -v -C 10 2>"$work/rping-cli.err") || rc=$?
  ((rc == 0)) || fail "rping sbq$c -> $addr ($rc): $out $(cat "$work/rping-cli.err"); server: $(cat "$work/rping-srv.out" "$work/rping-srv.err")"
  wait "$srv" || fail "rping server in sbq$s: $(cat "$work/rping-srv.out" "$work/rping-srv.err")"
  local got
  got=$(sed -n 's/^ping data: //p' <<<"$out")
  [[ $(wc -l <<<"$got") == 10 ]] || fail "rping sbq$c -> $addr: $(wc -l <<<"$got") pings: $out"
  [[ $(sed -n 's/^server ping data: //p' "$work/rping-srv.out") == "$got" ]] ||
    fail "rping: the server's data is not the client's: $(cat "$work/rping-srv.out")"
  echo "ok: rping${f[*]:+ ${f[*]}} sbq$c -> $addr: 10 pings, the same data on both sides ($(tail -1 <<<"$got"))"
}
rping_pair 2 1 198.18.93.2
rping_pair 1 2 198.18.93.1
rping_pair 2 1 fd00:93::2

# ---- ucmatose, udaddy -------------------------------------------------------------------
pair() {  # pair NAME SECONDS "SERVER ARGS" "CLIENT ARGS": server in sbq2, client in sbq1
  local name=$1 secs=$2 srv rc=0
  read -ra sargs <<<"$3"
  read -ra cargs <<<"$4"
  inns 2 timeout "$secs" "${sargs[@]}" >"$work/$name-srv.out" 2>&1 &
  srv=$!
  pids+=("$srv")
  sleep 1
  out=$(inns 1 timeout "$secs" "${cargs[@]}" 2>&1) || rc=$?
  ((rc == 0)) || fail "$name client ($rc): $out; server: $(cat "$work/$name-srv.out")"
  wait "$srv" || fail "$name server: $(cat "$work/$name-srv.out")"
  grep -q "test complete" <<<"$out" && grep -q "test complete" "$work/$name-srv.out" ||
    fail "$name: $out; server: $(cat "$work/$name-srv.out")"
}
pair ucmatose 60 "ucmatose -c 10" "ucmatose -s 198.18.93.2 -c 10"
echo "ok: ucmatose sbq1 -> sbq2: 10 RC connections, data both ways"
pair udaddy 60 "udaddy" "udaddy -s 198.18.93.2"
echo "ok: udaddy sbq1 -> sbq2: UD messages both ways"

# ---- rping -q: own QPs ------------------------------------------------------------
# Each side creates its QP with ibv_create_qp and moves it with
# rdma_init_qp_attr's attributes (CMA_INIT_QP_ATTR): on RoCE the RTR's
# sgid_index must be the connection's GID entry (an IPv4-mapped source
# with GID 0's link-local source is no path the peer's QP accepts).
rping_pair 2 1 198.18.93.2 -q
rping_pair 1 2 198.18.93.1 -q

# ---- mckey --------------------------------------------------------------------------
# A receiver in each namespace, then the sender in sbq1: sbq2's receiver
# gets the frames over the cable, sbq1's the device's own copy. UD
# multicast is unreliable: the sender is run again (at most 3 times) until
# both receivers have their 10 messages.
group=239.93.0.1
mckey_rcv() {  # mckey_rcv N: a receiver in sbqN (its PID in $rcv)
  inns "$1" stdbuf -oL timeout 60 mckey -m "$group" -b "198.18.93.$1" >"$work/mckey-$1.out" 2>&1 &
  rcv=$!
  pids+=("$rcv")
}
mckey_rcv 1
rcv1=$rcv
mckey_rcv 2
rcv2=$rcv
for n in 1 2; do
  until_ok 300 grep -qs "receiving data transfers" "$work/mckey-$n.out" || fail "mckey receiver in sbq$n: $(cat "$work/mckey-$n.out")"
done
# The kernel joined the group on each netdev (IGMP, as Linux's rdma_cm).
in_group() { ip -n "sbq$1" maddr show dev roce0 | grep -Eq "inet +${group//./\\.}( |\$)"; }
for n in 1 2; do in_group "$n" || fail "sbq$n: roce0 is no member of $group: $(ip -n "sbq$n" maddr show dev roce0)"; done
running() { kill -0 "$rcv1" 2>/dev/null || kill -0 "$rcv2" 2>/dev/null; }
for try in 1 2 3; do
  rc=0
  out=$(inns 1 timeout 30 mckey -m "$group" -b 198.18.93.1 -s 2>&1) || rc=$?
  ((rc == 0)) || fail "mckey sender ($rc): $out"
  until_ok 30 eval '! running' && break
done
for n in 1 2; do
  r=rcv$n
  wait "${!r}" || fail "mckey receiver in sbq$n: $(cat "$work/mckey-$n.out")"
  grep -q "test complete" "$work/mckey-$n.out" || fail "mckey receiver in sbq$n: $(cat "$work/mckey-$n.out")"
done
# Everyone left: so did the kernel (IGMP leave).
for n in 1 2; do until_ok 50 eval "! in_group $n" || fail "sbq$n: roce0 still in $group after the last mckey"; done
echo "ok: mckey sbq1 -> $group: both receivers got 10 datagrams ($try run(s) of the sender); roce0 joined the group (IGMP) while they ran"

# ---- ibd 1's frames -----------------------------------------------------------------
# ibd 1 stopped, its capture complete: what its port sent and received.
kill -TERM "${pids[0]}"
wait "${pids[0]}" || fail "ibd 1 did not stop cleanly: $(tail -20 "$work/1.log")"
frames() { tshark -r "$work/1.pcap" -Y "udp.dstport == 4791 && $1" 2>/dev/null | wc -l; }
# UD datagrams (SEND only, with immediate: BTH opcodes 100, 101) to a
# unicast QP other than QP1: udaddy's, both ways. IPv4, as Linux sends
# between IPv4 addresses; none as IPv6 (a GRH from GID 0, fe80::).
ud='(infiniband.bth.opcode == 100 || infiniband.bth.opcode == 101) && infiniband.bth.destqp != 1 && infiniband.bth.destqp != 0xffffff'
v4=$(frames "ip && $ud")
v6=$(frames "ipv6 && $ud")
((v4 > 0 && v6 == 0)) || fail "udaddy's datagrams: $v4 IPv4 frames, $v6 IPv6 frames (want IPv4 only)"
echo "ok: udaddy's datagrams: $v4 IPv4 frames, none IPv6"
# mckey's: to the group's IP and MAC (01:00:5e + the low 23 bits), TTL 64.
mc=$(frames "ip.dst == $group && eth.dst == 01:00:5e:5d:00:01 && ip.ttl == 64 && infiniband.bth.destqp == 0xffffff")
other=$(frames "ip.dst == $group && !(eth.dst == 01:00:5e:5d:00:01 && ip.ttl == 64)")
((mc >= 10 && other == 0)) || fail "mckey's frames: $mc to $group as expected, $other otherwise"
echo "ok: mckey's frames: $mc to $group at 01:00:5e:5d:00:01, TTL 64"
# The kernel's IGMP reports for the group left through the port (the
# netdev's frames go out as raw frames): switches would learn it.
igmp=$(tshark -r "$work/1.pcap" -Y "igmp && ip.src == 198.18.93.1 && igmp.maddr == $group" 2>/dev/null | wc -l)
((igmp > 0)) || fail "no IGMP report for $group from sbq1 in ibd 1's capture"
echo "ok: $igmp IGMP report(s) for $group from sbq1's roce0 on the wire"
