#!/usr/bin/env bash
# The RDMA CM over RoCEv2 ports (docs/cma.md "RoCE", docs/arp.md "RoCE
# destinations"): Debian's unmodified rdmacm-utils over our librdmacm.so.1
# and libibverbs.so.1 between two ibds, each in a network namespace of its
# own with its embedded simhca given an Ethernet port (--link-layer
# ethernet, distinct GUIDs so distinct MACs) and --netdev roce0, a veth
# pair between the namespaces. CABLE says how the ports are cabled:
#  - udp (test roce-cma): namespaces sbq1, sbq2, roce0 198.18.93.1/24 and
#    .2/24, fd00:93::1/64 and ::2/64; an Ethernet UDP cable between the
#    veth ends' own addresses (a /30, more specific than the TAPs' /24);
#  - iface (test roce-cma-veth): namespaces sbs1, sbs2, 198.18.95.0/24,
#    fd00:95::/64; each port on its namespace's veth end through the
#    host-interface backend (--cable IFACE=..., docs/cables.md "Host
#    interfaces (AF_PACKET)"), the veths MTU 1500 and without addresses
#    (their kernel told not to answer ARP: below), as two hosts' ibds on
#    an Ethernet cable.
# Suites abi and debian-tools; root. What it shows, either way:
#  - rping both ways, -v -C 10: each ping's data as sent on both sides
#    (the addresses resolved through the kernel's ARP on roce0, the
#    neighbour's MAC the peer port's, the connection's GIDs the
#    IPv4-mapped addresses' entries, the CM's MADs on QP1 with a GRH, the
#    QPs' address vectors with the neighbour's MAC);
#  - rping over IPv6 (on roce0);
#  - ucmatose (10 RC connections, data both ways);
#  - udaddy (UD through SIDR): messages both ways, its datagrams IPv4
#    frames (the SIDR reply's address vector from the source address's
#    GID entry, not the link-local GID 0), read from ibd 1's capture;
#  - cmtime -c 1000: every step timed (printed), the server still serving
#    after, its QPs and CQs all gone from ibd (ibdctl clients), no destroy
#    refused ("still used");
#  - rstream (500 x 1000 bytes, verified) and udpong (500 echoes; its
#    datagrams' address handles from the route's source GID entry: IPv4
#    frames, checked in the capture);
#  - rping -q both ways (QPs the application moves with
#    rdma_init_qp_attr: the RTR's sgid_index the connection's GID entry);
#  - mckey: a receiver on each side, a sender in the first namespace, an
#    IPv4 group (239.93.0.1, 239.95.0.1; no SA: the group's IP as the
#    MGID), both receivers get the datagrams; the kernel holds the group
#    on roce0 (IGMP) while a receiver runs and leaves it after; the frames
#    go to the group's MAC.
#   roce_cma.sh IBD IBDCTL ABI_DIR [CABLE]
set -euo pipefail
IBD=$1 IBDCTL=$2 ABI=$3 cable=${4:-udp}
# Each cable its own namespaces, addresses and group: both tests can run at once.
case $cable in
  udp) pfx=sbq net4=198.18.93 net6=fd00:93 group=239.93.0.1 group_mac=01:00:5e:5d:00:01 ;;
  iface) pfx=sbs net4=198.18.95 net6=fd00:95 group=239.95.0.1 group_mac=01:00:5e:5f:00:01 ;;
  *) echo "FAIL: cable '$cable': udp or iface" >&2; exit 2 ;;
esac
ns1=${pfx}1 ns2=${pfx}2
work=$(mktemp -d "${TMPDIR:-/tmp}/roce-cma-$cable-XXXXXX")
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
trap 'exit 1' INT TERM  # a timeout's signal runs the cleanup too
fail() {
  echo "FAIL: $*"
  for f in "$work"/1.log "$work"/2.log; do
    [[ -f $f ]] && { echo "--- $f (tail)"; tail -30 "$f"; }
  done
  exit 1
}
for t in rping ucmatose udaddy mckey cmtime rstream udpong tshark ip; do command -v "$t" >/dev/null || fail "$t not found (scripts/setup.sh installs rdmacm-utils)"; done
until_ok() {
  local n=$1
  shift
  for _ in $(seq "$n"); do "$@" && return 0; sleep 0.1; done
  return 1
}
libs=$ABI:$ABI/../lib
# inns N CMD...: CMD in namespace N ($ns1, $ns2) against that namespace's ibd, over our libraries.
inns() {
  local n=$1
  shift
  ip netns exec "$pfx$n" env "LD_LIBRARY_PATH=$libs" "OPENIB_SOCKET=$work/$n.sock" "$@"
}
# inns_bg N CMD... &: the same in the background, the subshell exec'ing
# (as do ip netns exec, env, stdbuf): $! is CMD's own PID (or its
# timeout(1)'s, which passes the cleanup's SIGTERM on), not a subshell's
# whose end would leave CMD running.
inns_bg() {
  local n=$1
  shift
  exec ip netns exec "$pfx$n" env "LD_LIBRARY_PATH=$libs" "OPENIB_SOCKET=$work/$n.sock" "$@"
}
# A leftover of a killed run (the names are fixed).
ip netns del "$ns1" 2>/dev/null || true
ip netns del "$ns2" 2>/dev/null || true
ip netns add "$ns1"
ip netns add "$ns2"
# The veth pair, made in the namespaces: veth ends ${pfx}1v0 and ${pfx}2v0.
ip link add "${ns1}v0" netns "$ns1" type veth peer name "${ns2}v0" netns "$ns2"
for n in 1 2; do ip -n "$pfx$n" link set lo up; done
if [[ $cable == udp ]]; then
  # The UDP cable's datagrams (frames up to 8,190 bytes) between the
  # veth ends' own addresses, a /30 more specific than the TAPs' /24.
  cable_of() { echo "LOCAL=$net4.$((248 + $1)):30093,PEER=$net4.$((251 - $1)):30093"; }
  for n in 1 2; do
    ip -n "$pfx$n" link set "$pfx${n}v0" mtu 9000 up
    ip -n "$pfx$n" addr add "$net4.$((248 + n))/30" dev "$pfx${n}v0"
  done
else
  # The ports' frames are the veth's own (AF_PACKET), MTU 1500 as on an
  # ordinary Ethernet: roce0's MTU is 1500 too, the ports' active MTU
  # 1024 (checked below). The veth ends have no address, but the kernel
  # of each namespace still gets every frame on its veth end (broadcasts,
  # and the rest as promiscuous), so sbs2's answers sbs1's ARP for
  # $net4.2 -- an address of its roce0 -- from the veth's MAC too (weak
  # host model, arp_ignore 0), and first: sbs1's neighbour entry then
  # holds a MAC no port has, the CM's REQ goes to sbs2's kernel (ICMP
  # port unreachable) and rping times out (seen in ibd 1's capture). As
  # docs/cables.md says, arp_ignore (8: never, ip-sysctl.rst) keeps the
  # veths silent; roce0 (the port's raw QP) answers alone. No IPv6 on the
  # veths either: no router solicitations or MLD reports of their own.
  cable_of() { echo "IFACE=$pfx${1}v0"; }
  for n in 1 2; do
    ip netns exec "$pfx$n" sysctl -qw "net.ipv4.conf.$pfx${n}v0.arp_ignore=8" "net.ipv6.conf.$pfx${n}v0.disable_ipv6=1"
    ip -n "$pfx$n" link set "$pfx${n}v0" up
  done
fi

start() {  # start N GUID [IBD ARGS...]
  mkdir -p "$work/$1.run"
  ip netns exec "$pfx$1" "$IBD" --socket "$work/$1.sock" --log info --run-dir "$work/$1.run" --state-dir none \
    --cable "$(cable_of "$1")" --simhca-arg=--link-layer --simhca-arg=ethernet \
    --simhca-arg=--guid --simhca-arg="$2" --netdev roce0 "${@:3}" >"$work/$1.log" 2>&1 </dev/null &
  pids+=($!)
  until_ok 300 grep -qs "ibd: ready" "$work/$1.log" || fail "ibd $1 not ready"
}
# ibd 1's port's frames, both ways, for the checks at the end.
start 1 0x0002c90300000c00 --pcap "$work/1.pcap"
start 2 0x0002c90300000d00
has_tap() { ip -n "$1" link show roce0 >/dev/null 2>&1; }
for n in 1 2; do
  until_ok 100 has_tap "$pfx$n" || fail "no roce0 in $pfx$n"
  ip -n "$pfx$n" addr add "$net4.$n/24" dev roce0
  ip -n "$pfx$n" addr add "$net6::$n/64" dev roce0 nodad
  ip -n "$pfx$n" link set roce0 up
done
gid_there() {  # gid_there N TEXT: ibv_devinfo lists TEXT as a RoCE v2 GID (all read: no SIGPIPE)
  local info
  info=$(inns "$1" timeout 30 ibv_devinfo -v) || return 1
  grep -Eq "GID\[ *[0-9]+\]:[[:space:]]+$2, RoCE v2" <<<"$info"
}
for n in 1 2; do
  until_ok 100 gid_there "$n" "::ffff:$net4.$n" || fail "ibd $n: no GID ::ffff:$net4.$n"
  until_ok 100 gid_there "$n" "$net6::$n" || fail "ibd $n: no GID $net6::$n"
done
until_ok 50 ip netns exec "$ns1" ping -c 1 -W 1 -q "$net4.2" >/dev/null || fail "no ping $ns1 -> $ns2"
# The first connection must find no neighbour entry yet: the RDMA CM's
# resolution makes the kernel ARP (the ping above made one: flushed).
for n in 1 2; do ip -n "$pfx$n" neigh flush dev roce0; done
echo "ok: roce0 up in $ns1 and $ns2, the addresses RoCE v2 GIDs"
if [[ $cable == iface ]]; then
  # Every RoCEv2 frame (1,024 bytes of payload and ~100 of headers) and
  # every frame of roce0 (MTU 1500) fits the veth's 1,500.
  for n in 1 2; do
    m=$(inns "$n" timeout 30 ibv_devinfo | sed -n 's/^[[:space:]]*active_mtu:[[:space:]]*\([0-9]*\).*/\1/p')
    [[ $m == 1024 ]] || fail "ibd $n: active MTU '$m', not 1024 (the veth's MTU is 1500)"
    [[ $(ip -n "$pfx$n" -o link show roce0) == *" mtu 1500 "* ]] || fail "$pfx$n: roce0's MTU is not 1500"
  done
  echo "ok: ports cabled to $ns1's and $ns2's veth ends (IFACE=), active MTU 1024 on a veth of MTU 1500"
fi

# ---- rping both ways --------------------------------------------------------------
# rping -v prints each ping's data ("rdma-ping-N: " and its rotating
# pattern): "ping data: ..." on the client, "server ping data: ..." on the
# server; the two must be the same ten lines.
rping_pair() {  # rping_pair SERVER CLIENT ADDR [RPING FLAG]
  local s=$1 c=$2 addr=$3 srv rc=0 out
  local -a f=("${@:4}")
  inns_bg "$s" timeout 60 rping -s "${f[@]}" -a "$addr" -v -C 10 >"$work/rping-srv.out" 2>"$work/rping-srv.err" &
  srv=$!
  pids+=("$srv")
  sleep 1
  out=$(inns "$c" timeout 60 rping -c "${f[@]}" -a "$addr" -v -C 10 2>"$work/rping-cli.err") || rc=$?
  ((rc == 0)) || fail "rping $pfx$c -> $addr ($rc): $out $(cat "$work/rping-cli.err"); server: $(cat "$work/rping-srv.out" "$work/rping-srv.err")"
  wait "$srv" || fail "rping server in $pfx$s: $(cat "$work/rping-srv.out" "$work/rping-srv.err")"
  local got
  got=$(sed -n 's/^ping data: //p' <<<"$out")
  [[ $(wc -l <<<"$got") == 10 ]] || fail "rping $pfx$c -> $addr: $(wc -l <<<"$got") pings: $out"
  [[ $(sed -n 's/^server ping data: //p' "$work/rping-srv.out") == "$got" ]] ||
    fail "rping: the server's data is not the client's: $(cat "$work/rping-srv.out")"
  echo "ok: rping${f[*]:+ ${f[*]}} $pfx$c -> $addr: 10 pings, the same data on both sides ($(tail -1 <<<"$got"))"
}
rping_pair 2 1 "$net4.2"
# The RDMA CM's resolution had the kernel ARP on roce0: the answer is
# ibd 2's port's, roce0's MAC in $ns2. (Over a veth whose kernel answers
# too, the veth's MAC came first, the REQ went to $ns2's kernel -- ICMP
# port unreachable -- and rping timed out: see arp_ignore above.)
mac2=$(ip -n "$ns2" -o link show roce0 | sed -n 's/.* link\/ether \([0-9a-f:]*\) .*/\1/p')
neigh=$(ip -n "$ns1" neigh show "$net4.2" dev roce0)
[[ -n $mac2 && $neigh == *"lladdr $mac2 "* ]] || fail "$ns1's neighbour $net4.2 is not ibd 2's port ($mac2): $neigh"
echo "ok: $ns1's neighbour $net4.2: $mac2, ibd 2's port (roce0 in $ns2)"
rping_pair 1 2 "$net4.1"
rping_pair 2 1 "$net6::2"

# ---- ucmatose, udaddy -------------------------------------------------------------------
pair() {  # pair NAME SECONDS "SERVER ARGS" "CLIENT ARGS": server in $ns2, client in $ns1
  local name=$1 secs=$2 srv rc=0
  read -ra sargs <<<"$3"
  read -ra cargs <<<"$4"
  inns_bg 2 timeout "$secs" "${sargs[@]}" >"$work/$name-srv.out" 2>&1 &
  srv=$!
  pids+=("$srv")
  sleep 1
  out=$(inns 1 timeout "$secs" "${cargs[@]}" 2>&1) || rc=$?
  ((rc == 0)) || fail "$name client ($rc): $out; server: $(cat "$work/$name-srv.out")"
  wait "$srv" || fail "$name server: $(cat "$work/$name-srv.out")"
  grep -q "test complete" <<<"$out" && grep -q "test complete" "$work/$name-srv.out" ||
    fail "$name: $out; server: $(cat "$work/$name-srv.out")"
}
pair ucmatose 60 "ucmatose -c 10" "ucmatose -s $net4.2 -c 10"
echo "ok: ucmatose $ns1 -> $ns2: 10 RC connections, data both ways"
pair udaddy 60 "udaddy" "udaddy -s $net4.2"
echo "ok: udaddy $ns1 -> $ns2: UD messages both ways"

# ---- cmtime -------------------------------------------------------------------------
# cmtime -c N: N connections made and torn down step by step, each step
# timed over all of them. The CQs rdma_create_qp made for the first id
# are carried to all the others (cmtime's one ibv_qp_init_attr): they go
# with the last QP on them ("CQ still used" otherwise). Debian's server
# serves until killed; it must free each connection's QP and CQ as it
# sees the disconnect. (No timeout(1) around the server: $srv must be
# cmtime itself.)
conns=1000
# objs N PID: "CQS QPS" of that process's connection to ibd N (none: "- -").
objs() {
  "$IBDCTL" --socket "$work/$1.sock" clients |
    awk -v p="$2" '$2 == p {c = $6; q = $7} END {print (c == "" ? "-" : c), (q == "" ? "-" : q)}'
}
freed() { [[ $(objs "$1" "$2") == "0 0" ]]; }
inns_bg 2 cmtime -b "$net4.2" -c "$conns" >"$work/cmtime-srv.out" 2>&1 &
srv=$!
pids+=("$srv")
sleep 1
rc=0
t0=$SECONDS
out=$(inns 1 timeout 120 cmtime -s "$net4.2" -c "$conns" 2>&1) || rc=$?
((rc == 0)) || fail "cmtime client ($rc): $out; server: $(cat "$work/cmtime-srv.out")"
steps=$(grep -E '^(create id|resolve addr|resolve route|create qp|connect|disconnect|destroy) *:' <<<"$out") || true
(($(wc -l <<<"$steps") == 7)) || fail "cmtime client: not every step timed: $out"
sed -n '/^step/,$p' <<<"$out"
kill -0 "$srv" 2>/dev/null || fail "cmtime server gone: $(cat "$work/cmtime-srv.out")"
until_ok 25 freed 2 "$srv" ||
  fail "cmtime server (PID $srv): CQs and QPs left in ibd 2: $(objs 2 "$srv"): $("$IBDCTL" --socket "$work/2.sock" clients 2>&1)"
kill "$srv"
wait "$srv" 2>/dev/null || true
! grep -h "still used" "$work/1.log" "$work/2.log" "$work/cmtime-srv.out" - <<<"$out" || fail "cmtime: ibd refused a destroy"
# The CMs' MADs sent again (a lost REQ, REP or DREQ costs a response
# timeout: the "max ms" of a step).
cm_retries() { "$IBDCTL" --socket "$work/$1.sock" counters | awk '$1 == "cm.port1.retries" {print $2}'; }
echo "ok: cmtime $ns1 -> $ns2: $conns connections in $((SECONDS - t0)) s; the server holds no CQ or QP afterwards ($(grep '^connect ' <<<"$steps" | tr -s ' '); MADs sent again: $(cm_retries 1) by ibd 1, $(cm_retries 2) by ibd 2)"

# ---- rping -q: own QPs ------------------------------------------------------------
# Each side creates its QP with ibv_create_qp and moves it with
# rdma_init_qp_attr's attributes (CMA_INIT_QP_ATTR): on RoCE the RTR's
# sgid_index must be the connection's GID entry (an IPv4-mapped source
# with GID 0's link-local source is no path the peer's QP accepts).
rping_pair 2 1 "$net4.2" -q
rping_pair 1 2 "$net4.1" -q

# ---- rsockets -----------------------------------------------------------------------
# Debian's rstream (stream rsockets: RC connections through the RDMA CM,
# the data verified, -T v) and udpong (datagram rsockets: UD QPs whose
# address handles come from the RDMA CM's route; on RoCE with a GRH from
# the source address's GID entry, an IPv4 frame for an IPv4 peer) over our
# librdmacm.so.1, server in $ns2.
# rsocket_pair TOOL PORT "ARGS": TOOL -b in $ns2 (its PID in srv), then
# TOOL -s ARGS in $ns1, which must exit 0 with a "custom" row (in row).
rsocket_pair() {
  local tool=$1 port=$2 rc=0 out
  read -ra args <<<"$3"
  inns_bg 2 timeout 60 "$tool" -b "$net4.2" -p "$port" "${args[@]}" >"$work/$tool-srv.out" 2>&1 &
  srv=$!
  pids+=("$srv")
  sleep 1
  out=$(inns 1 timeout 60 "$tool" -s "$net4.2" -p "$port" "${args[@]}" 2>&1) || rc=$?
  ((rc == 0)) || fail "$tool client ($rc): $out; server: $(cat "$work/$tool-srv.out")"
  row=$(grep -E '^custom ' <<<"$out" | tr -s ' ') || fail "$tool: no result row: $out"
}
rsocket_pair rstream 7471 "-C 500 -S 1000 -T v"
wait "$srv" || fail "rstream server: $(cat "$work/rstream-srv.out")"
echo "ok: rstream $ns1 -> $ns2, 500 x 1000 bytes verified: $row"
rsocket_pair udpong 7174 "-C 500 -S 1000 -T e"
kill "$srv" 2>/dev/null || true  # (udpong's server serves until killed)
wait "$srv" 2>/dev/null || true
echo "ok: udpong $ns1 -> $ns2, 500 echoes of 1000 bytes: $row"

# ---- mckey --------------------------------------------------------------------------
# A receiver in each namespace, then the sender in $ns1: $ns2's receiver
# gets the frames over the cable, $ns1's the device's own copy. UD
# multicast is unreliable: the sender is run again (at most 3 times) until
# both receivers have their 10 messages.
mckey_rcv() {  # mckey_rcv N: a receiver in namespace N (its PID in $rcv)
  inns_bg "$1" stdbuf -oL timeout 60 mckey -m "$group" -b "$net4.$1" >"$work/mckey-$1.out" 2>&1 &
  rcv=$!
  pids+=("$rcv")
}
mckey_rcv 1
rcv1=$rcv
mckey_rcv 2
rcv2=$rcv
for n in 1 2; do
  until_ok 300 grep -qs "receiving data transfers" "$work/mckey-$n.out" || fail "mckey receiver in $pfx$n: $(cat "$work/mckey-$n.out")"
done
# The kernel joined the group on each netdev (IGMP, as Linux's rdma_cm).
in_group() { ip -n "$pfx$1" maddr show dev roce0 | grep -Eq "inet +${group//./\\.}( |\$)"; }
for n in 1 2; do in_group "$n" || fail "$pfx$n: roce0 is no member of $group: $(ip -n "$pfx$n" maddr show dev roce0)"; done
running() { kill -0 "$rcv1" 2>/dev/null || kill -0 "$rcv2" 2>/dev/null; }
for try in 1 2 3; do
  rc=0
  out=$(inns 1 timeout 30 mckey -m "$group" -b "$net4.1" -s 2>&1) || rc=$?
  ((rc == 0)) || fail "mckey sender ($rc): $out"
  until_ok 30 eval '! running' && break
done
for n in 1 2; do
  r=rcv$n
  wait "${!r}" || fail "mckey receiver in $pfx$n: $(cat "$work/mckey-$n.out")"
  grep -q "test complete" "$work/mckey-$n.out" || fail "mckey receiver in $pfx$n: $(cat "$work/mckey-$n.out")"
done
# Everyone left: so did the kernel (IGMP leave).
for n in 1 2; do until_ok 50 eval "! in_group $n" || fail "$pfx$n: roce0 still in $group after the last mckey"; done
echo "ok: mckey $ns1 -> $group: both receivers got 10 datagrams ($try run(s) of the sender); roce0 joined the group (IGMP) while they ran"

# ---- ibd 1's frames -----------------------------------------------------------------
# ibd 1 stopped, its capture complete: what its port sent and received.
kill -TERM "${pids[0]}"
wait "${pids[0]}" || fail "ibd 1 did not stop cleanly: $(tail -20 "$work/1.log")"
frames() { tshark -r "$work/1.pcap" -Y "udp.dstport == 4791 && $1" 2>/dev/null | wc -l; }
# UD datagrams (SEND only, with immediate: BTH opcodes 100, 101) to a
# unicast QP other than QP1: udaddy's and udpong's (rsockets' datagrams
# carry 1000 bytes and more), both ways. IPv4, as Linux sends between IPv4
# addresses; none as IPv6 (a GRH from GID 0, fe80::, which two simhcas
# accept but an IPv4 peer's stack does not).
ud='(infiniband.bth.opcode == 100 || infiniband.bth.opcode == 101) && infiniband.bth.destqp != 1 && infiniband.bth.destqp != 0xffffff'
v4=$(frames "ip && $ud")
v6=$(frames "ipv6 && $ud")
big=$(frames "ip && $ud && frame.len > 1000")
((v4 > 0 && v6 == 0)) || fail "udaddy's and udpong's datagrams: $v4 IPv4 frames, $v6 IPv6 frames (want IPv4 only)"
((big >= 500)) || fail "udpong's datagrams: $big IPv4 frames over 1,000 bytes, want its 500 echoes at least"
echo "ok: udaddy's and udpong's datagrams: $v4 IPv4 frames ($big of them udpong's), none IPv6"
# mckey's: to the group's IP and MAC (01:00:5e + the low 23 bits), TTL 64.
mc=$(frames "ip.dst == $group && eth.dst == $group_mac && ip.ttl == 64 && infiniband.bth.destqp == 0xffffff")
other=$(frames "ip.dst == $group && !(eth.dst == $group_mac && ip.ttl == 64)")
((mc >= 10 && other == 0)) || fail "mckey's frames: $mc to $group as expected, $other otherwise"
echo "ok: mckey's frames: $mc to $group at $group_mac, TTL 64"
# The kernel's IGMP reports for the group left through the port (the
# netdev's frames go out as raw frames): switches would learn it.
igmp=$(tshark -r "$work/1.pcap" -Y "igmp && ip.src == $net4.1 && igmp.maddr == $group" 2>/dev/null | wc -l)
((igmp > 0)) || fail "no IGMP report for $group from $ns1 in ibd 1's capture"
echo "ok: $igmp IGMP report(s) for $group from $ns1's roce0 on the wire"
