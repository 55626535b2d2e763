#!/usr/bin/env bash
# RoCEv2 over a host interface (docs/cables.md "Host interfaces
# (AF_PACKET)", docs/simhca.md §16.2): two network namespaces, sbp1 and
# sbp2, with a veth pair between them (sbp1v0 -- sbp2v0, MTU 1500), one
# ibd in each whose embedded simhca has an Ethernet port cabled to its
# namespace's veth end (--cable IFACE=...). The kernel's own stack shares
# the interfaces: 198.18.94.1/24 and .2/24 carry the tools' out-of-band TCP
# exchange over the same veth as the RoCEv2 frames (test roce-veth, suites
# abi and debian-tools; root).
#  - refused with the reason: IFACE= without --link-layer ethernet, an
#    interface of another namespace, IFACE= with PEER=, a down interface;
#  - Debian's ibv_rc_pingpong -g 0 -c, ibv_ud_pingpong -g 0 -c and
#    ib_write_bw -x 0 over our libibverbs.so.1, server in sbp1, client in
#    sbp2 by IP address: both ends exit 0;
#  - tshark capturing on sbp1v0 inside sbp1 meanwhile: every frame to UDP
#    4791 decodes as RoCEv2 (Ethernet, IPv6, UDP, InfiniBand), none of the
#    capture's frames is malformed;
#  - a hostile sender on sbp2v0 (python3, AF_PACKET): RoCEv2 frames with a
#    bad ICRC, runts (truncated RoCEv2 frames of 42 and 20 bytes) and, with
#    both MTUs raised to 9000, frames of 9014 bytes: ibd A's simhca counts
#    each (bad ICRC, malformed, and at the cable too long) and
#    ibv_rc_pingpong still works afterwards;
#  - the veth's carrier is the ports' link: sbp2v0 set down, both ports
#    go PORT_DOWN (ibv_devinfo), set up, PORT_ACTIVE, the ping-pong works.
#   roce_veth.sh IBD ABI_DIR
set -euo pipefail
IBD=$1 ABI=$2
NS1=sbp1 NS2=sbp2 IF1=sbp1v0 IF2=sbp2v0 IP1=198.18.94.1 IP2=198.18.94.2
work=$(mktemp -d "${TMPDIR:-/tmp}/roce-veth-XXXXXX")
# shellcheck source=../../scripts/ibd_pair.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/ibd_pair.sh"
made_ns=()
TSHARK_PID='' SRV_PID=''
cleanup() {
  local p
  for p in $TSHARK_PID $SRV_PID; do
    kill -TERM "$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
  done
  stop_daemons
  local n
  for n in "${made_ns[@]}"; do ip netns del "$n" 2>/dev/null || true; done
  [[ -n ${KEEP_WORK:-} ]] || rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 1' INT TERM  # a timeout's signal runs the cleanup too
fail() {
  echo "FAIL: $*"
  echo "--- ibd a (tail)"; tail -20 "$work/a.log" 2>/dev/null || true
  echo "--- ibd b (tail)"; tail -20 "$work/b.log" 2>/dev/null || true
  exit 1
}
((EUID == 0)) || fail "needs root (network namespaces, AF_PACKET)"
for t in ip ibv_rc_pingpong ibv_ud_pingpong ib_write_bw tshark python3; do
  command -v "$t" >/dev/null || fail "$t not found (scripts/setup.sh installs it)"
done

# ---- the namespaces and the veth ------------------------------------------------------
for n in $NS1 $NS2; do
  ip netns list | grep -qw "$n" && fail "network namespace $n exists already (another run, or a leftover: ip netns del $n)"
  ip netns add "$n"
  made_ns+=("$n")
  ip -n "$n" link set lo up
done
ip link add "$IF1" netns $NS1 mtu 1500 type veth peer name "$IF2" netns $NS2 mtu 1500
ip -n $NS1 addr add $IP1/24 dev "$IF1"
ip -n $NS2 addr add $IP2/24 dev "$IF2"
ip -n $NS1 link set "$IF1" up
ip -n $NS2 link set "$IF2" up
for _ in $(seq 50); do  # the veth's carrier comes up once both ends are
  ip netns exec $NS2 ping -c1 -W1 $IP1 >/dev/null 2>&1 && break
  sleep 0.1
done
ip netns exec $NS2 ping -c1 -W1 $IP1 >/dev/null || fail "no IP path $IP2 -> $IP1 over the veth"

# ---- refusals: ibd exits, its simhca says why ---------------------------------------------
# refused WHAT MESSAGE NS ARGS...: ibd in NS with ARGS ends non-zero, its log holding MESSAGE.
refused() {
  local what=$1 msg=$2 ns=$3 rc=0
  shift 3
  mkdir -p "$work/r.run"
  ip netns exec "$ns" timeout 30 "$IBD" --socket "$work/r.sock" --lid 1 --log warn --run-dir "$work/r.run" "$@" \
    >"$work/r.log" 2>&1 </dev/null || rc=$?
  ((rc != 0)) || fail "$what: ibd started"
  grep -qF "$msg" "$work/r.log" || fail "$what: no '$msg' in: $(cat "$work/r.log")"
  echo "ok: refused, $what: $msg"
}
eth=(--simhca-arg=--link-layer --simhca-arg=ethernet)
refused "IFACE= on an InfiniBand port" "IFACE= (a host interface) carries Ethernet frames: it needs --link-layer ethernet" \
  $NS1 --cable "IFACE=$IF1"
refused "an interface of another namespace" "no interface '$IF2' in this network namespace" $NS1 --cable "IFACE=$IF2" "${eth[@]}"
refused "IFACE= with PEER=" "IFACE= stands alone" $NS1 --cable "IFACE=$IF1,PEER=$IP2:7000" "${eth[@]}"
ip -n $NS1 link add sbp1d0 type veth peer name sbp1d1  # down, as made
refused "an interface that is down" "interface 'sbp1d0' is down (ip link set sbp1d0 up)" $NS1 --cable IFACE=sbp1d0 "${eth[@]}"
ip -n $NS1 link del sbp1d0

# ---- the two ibds, one per namespace --------------------------------------------------
# start_ibd_ns NAME NS IFACE GUID VAR: ibd in NS, its port 1 on IFACE (its
# simhca at log level info: it logs its counters when it ends).
start_ibd_ns() {
  local name=$1 ns=$2 iface=$3 guid=$4 var=$5
  mkdir -p "$work/$name.run"
  ip netns exec "$ns" "$IBD" --socket "$work/$name.sock" --lid 1 --log warn --run-dir "$work/$name.run" \
    --cable "IFACE=$iface" --simhca-arg=--link-layer --simhca-arg=ethernet --simhca-arg=--log --simhca-arg=info \
    --simhca-arg=--guid --simhca-arg="$guid" >"$work/$name.log" 2>&1 </dev/null &
  local pid=$!
  daemons+=("$pid")
  await_ready "$pid" "$var" "ibd $name" "$work/$name.log" grep -qs "ibd: ready on $work/$name.sock" "$work/$name.log"
}
PID_A='' PID_B=''
start_ibd_ns a $NS1 "$IF1" 0x0002c90300005e01 PID_A
start_ibd_ns b $NS2 "$IF2" 0x0002c90300005e02 PID_B
SA=$work/a.sock SB=$work/b.sock
export LD_LIBRARY_PATH=$ABI:$ABI/../lib
# port_state SOCK: port 1's state as Debian's ibv_devinfo shows it.
port_state() { OPENIB_SOCKET=$1 timeout 30 ibv_devinfo | awk '$1 == "state:" { print $2; exit }'; }
await_state() {  # SOCK STATE WHAT
  for _ in $(seq 100); do
    [[ $(port_state "$1") == "$2" ]] && return 0
    sleep 0.1
  done
  fail "$3: port 1 is $(port_state "$1"), not $2"
}
await_state "$SA" PORT_ACTIVE "ibd A ready"
await_state "$SB" PORT_ACTIVE "ibd B ready"
echo "ok: both ports PORT_ACTIVE on their veth ends"
# GUID 0x0002c90300005e01 + port 1 -> MAC 02:03:00:00:5e:02 (ibd A's port),
# link-local GID fe80::3:ff:fe00:5e02 (roce_verbs.sh shows the rule).
MAC_A=02:03:00:00:5e:02 GID_A=fe80::3:ff:fe00:5e02

# ---- capture on the veth, inside sbp1 -------------------------------------------------
ip netns exec $NS1 tshark -n -q -i "$IF1" -w "$work/veth.pcap" >"$work/tshark.log" 2>&1 </dev/null &
TSHARK_PID=$!
for _ in $(seq 100); do
  grep -qs "Capturing on" "$work/tshark.log" && break
  kill -0 "$TSHARK_PID" 2>/dev/null || fail "tshark: $(cat "$work/tshark.log")"
  sleep 0.1
done
grep -qs "Capturing on" "$work/tshark.log" || fail "tshark did not start capturing: $(cat "$work/tshark.log")"

# ---- ping-pongs and perftest across the namespaces ------------------------------------
# run_ns SECONDS PROG ARGS...: the server (PROG ARGS -p PORT) on ibd A in
# sbp1; once it listens, the client (... IP1) on ibd B in sbp2. Both must
# exit 0. Logs in $work/srv.log, $work/cli.log.
run_ns() {
  local secs=$1 port=18515 c=0 sr=0
  shift
  ip netns exec $NS1 env OPENIB_SOCKET="$SA" timeout "$secs" "$@" -p $port >"$work/srv.log" 2>&1 &
  SRV_PID=$!
  for _ in $(seq 50); do
    ip netns exec $NS1 ss -ltn "sport = :$port" | grep -q LISTEN && break
    sleep 0.1
  done
  ip netns exec $NS2 env OPENIB_SOCKET="$SB" timeout "$secs" "$@" -p $port $IP1 >"$work/cli.log" 2>&1 || c=$?
  wait "$SRV_PID" || sr=$?
  SRV_PID=''
  ((c == 0 && sr == 0)) || fail "$* (client $c, server $sr): $(cat "$work/srv.log" "$work/cli.log")"
}
pp() {
  run_ns 60 "$@"
  grep -q "iters in" "$work/cli.log" && grep -q "iters in" "$work/srv.log" ||
    fail "$*: no result line: $(cat "$work/srv.log" "$work/cli.log")"
  grep -q "GID $GID_A" "$work/cli.log" || fail "$*: the client did not address ibd A's GID $GID_A"
  echo "ok: $*: $(grep 'iters in' "$work/cli.log")"
}
pp ibv_rc_pingpong -g 0 -c -n 200 -s 4096
pp ibv_ud_pingpong -g 0 -c -n 200 -s 1024
run_ns 120 ib_write_bw -x 0 -s 65536 -n 2000
bw=$(grep -E '^ *65536 +[0-9]+ ' "$work/cli.log" | tail -1 | tr -s ' ') || true
[[ -n $bw ]] || fail "ib_write_bw: no results line: $(cat "$work/cli.log")"
echo "ok: ib_write_bw -x 0 over the veth (bytes iterations BW-peak BW-average MB/s msg-rate Mpps): $bw"

# ---- the capture ----------------------------------------------------------------------
kill -INT "$TSHARK_PID" 2>/dev/null || true
wait "$TSHARK_PID" 2>/dev/null || true
TSHARK_PID=''
heur=()  # perftest's payloads are not RPC-over-RDMA and the like (capture_test.sh)
for h in rpcrdma_infiniband smb_direct_infiniband nvme_rdma iser_infiniband lnet_ib smcr_infiniband \
  sdp_infiniband fc_infiniband mellanox_eoib eth_over_ib; do heur+=(--disable-heuristic "$h"); done
frames=$(tshark -n -r "$work/veth.pcap" "${heur[@]}" -o udp.ignore_ipv6_zero_checksum:TRUE -T fields \
  -e frame.protocols -e udp.dstport -e _ws.malformed 2>/dev/null) || fail "tshark could not read the capture"
total=$(grep -c . <<<"$frames" || true)
to_roce=$(awk -F'\t' '$2 == 4791' <<<"$frames" | wc -l)
roce=$(awk -F'\t' '$2 == 4791 && $1 ~ /^eth:ethertype:ipv6:udp:infiniband/ && $3 == ""' <<<"$frames" | wc -l)
malformed=$(awk -F'\t' '$3 != ""' <<<"$frames" | wc -l)
((roce > 1000)) || fail "only $roce RoCEv2 frames captured on $IF1 ($total in all)"
((roce == to_roce)) || fail "$((to_roce - roce)) of $to_roce frames to UDP 4791 are not clean RoCEv2"
((malformed == 0)) || fail "$malformed of $total captured frames are malformed"
echo "ok: capture on $IF1 in $NS1: $total frames, $roce RoCEv2 over IPv6 to UDP 4791, none malformed;" \
  "the rest the kernel stack's: $(awk -F'\t' '$2 != 4791 {print $1}' <<<"$frames" | sort | uniq -c | awk '{print $1, $2}' | paste -sd, -)"

# ---- a hostile sender on sbp2v0 ---------------------------------------------------------
BAD_ICRC=5 RUNTS=4 HUGE=3
ip -n $NS1 link set "$IF1" mtu 9000
ip -n $NS2 link set "$IF2" mtu 9000
ip netns exec $NS2 python3 - "$IF2" "$MAC_A" "$GID_A" $BAD_ICRC $RUNTS $HUGE <<'EOF' || fail "the hostile sender failed"
import ipaddress, socket, struct, sys
iface, mac, gid, bad_icrc, runts, huge = sys.argv[1], sys.argv[2], sys.argv[3], *map(int, sys.argv[4:])
dst = bytes.fromhex(mac.replace(":", ""))
src = bytes.fromhex("020000005e99")
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind((iface, 0))
def ipv4_sum(h):
    t = sum(struct.unpack("!%dH" % (len(h) // 2), h))
    while t >> 16: t = (t & 0xFFFF) + (t >> 16)
    return ~t & 0xFFFF
# RoCEv2 (IPv6, UDP 4791) UD SEND Only to QP1 with a MAD's worth of zeros
# and an ICRC that cannot be right (annex A17.4: the receiver drops it).
bth = struct.pack("!BBHII", 0x64, 0, 0xFFFF, 1, 0)
deth = struct.pack("!II", 0x80010000, 1)
transport = bth + deth + bytes(256) + b"\xde\xad\xbe\xef"
udp = struct.pack("!HHHH", 49152, 4791, 8 + len(transport), 0) + transport
ip6 = struct.pack("!IHBB", 6 << 28, len(udp), 17, 64) + ipaddress.IPv6Address("fe80::99").packed \
    + ipaddress.IPv6Address(gid).packed
for _ in range(bad_icrc): s.send(dst + src + b"\x86\xdd" + ip6 + udp)
# Runts: an IPv4 RoCEv2 frame cut after its UDP header (42 bytes, total
# length 60 claimed), and one cut inside its IPv4 header (20 bytes).
ip4 = bytearray(struct.pack("!BBHHHBBH4s4s", 0x45, 0, 60, 0, 0x4000, 64, 17, 0, bytes([198, 18, 94, 2]), bytes([198, 18, 94, 1])))
ip4[10:12] = struct.pack("!H", ipv4_sum(bytes(ip4)))
runt = dst + src + b"\x08\x00" + bytes(ip4) + struct.pack("!HHHH", 49152, 4791, 40, 0)
for i in range(runts): s.send(runt if i % 2 == 0 else runt[:20])
# Longer than any frame an Ethernet cable takes (8,190 bytes).
for _ in range(huge): s.send(dst + src + b"\x86\xdd" + bytes(9000))
EOF
ip -n $NS1 link set "$IF1" mtu 1500
ip -n $NS2 link set "$IF2" mtu 1500
sleep 0.5
pp ibv_rc_pingpong -g 0 -c -n 100 -s 1024
echo "ok: ibv_rc_pingpong after the hostile frames"

# ---- the veth's carrier is the cable's light ---------------------------------------------
ip -n $NS2 link set "$IF2" down
await_state "$SA" PORT_DOWN "$IF2 set down in $NS2 (ibd A's $IF1 lost its carrier)"
await_state "$SB" PORT_DOWN "$IF2 set down in $NS2 (ibd B's own interface)"
ip -n $NS2 link set "$IF2" up
await_state "$SA" PORT_ACTIVE "$IF2 up again"
await_state "$SB" PORT_ACTIVE "$IF2 up again"
for _ in $(seq 50); do
  ip netns exec $NS2 ping -c1 -W1 $IP1 >/dev/null 2>&1 && break
  sleep 0.1
done
pp ibv_rc_pingpong -g 0 -c -n 100 -s 1024
echo "ok: $IF2 down: both ports PORT_DOWN; up: both PORT_ACTIVE, and the ping-pong works again"

stop_daemons  # the simhcas log their counters as they end
for l in "simhca: ethernet:" "simhca: data path:" "simhca: port1 on interface $IF1:"; do
  grep -q "$l" "$work/a.log" || fail "ibd A's log has no '$l' line"
done
eth_line=$(grep -m1 "simhca: ethernet:" "$work/a.log")
data=$(grep -m1 "simhca: data path:" "$work/a.log")
cable=$(grep -m1 "simhca: port1 on interface $IF1:" "$work/a.log")
num() { sed -nE "s/.*$1 ([0-9]+).*/\1/p" <<<"$2"; }
got_icrc=$(num "bad ICRC" "$eth_line") got_mal=$(num "malformed" "$data")
got_long=$(sed -nE 's/.*rx [0-9]+ \(([0-9]+) malformed.*/\1/p' <<<"$cable")
((got_icrc == BAD_ICRC)) || fail "ibd A's simhca counted $got_icrc bad ICRCs, not $BAD_ICRC: $eth_line"
((got_mal == RUNTS)) || fail "ibd A's simhca counted $got_mal malformed frames, not $RUNTS: $data"
((got_long == HUGE)) || fail "ibd A's cable counted $got_long frames too long, not $HUGE: $cable"
echo "ok: hostile frames counted: $BAD_ICRC bad ICRC, $RUNTS runts malformed, $HUGE of 9014 bytes dropped at the cable"
echo "    ${cable#*] }"
echo "roce-veth: all checks passed"
