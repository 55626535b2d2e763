#!/usr/bin/env bash
# RoCEv2 ports under Debian's unmodified ibverbs-utils and perftest, over
# our libibverbs.so.1 (docs/simhca.md §16, docs/library.md "Verbs ABI"):
# two ibds on this host, each with its embedded simhca given Ethernet ports
# (--link-layer ethernet) and distinct GUIDs (so distinct MACs), cabled
# back to back by an Ethernet UDP cable on 127.0.0.1, no subnet manager
# (test roce-verbs, suites abi and debian-tools):
#  - ibv_devinfo -v: port 1 Ethernet, PORT_ACTIVE with LID 0, MTU 1024,
#    GID 0 the link-local fe80:: address of the port's MAC, type RoCE v2;
#  - ibv_rc_pingpong, ibv_uc_pingpong, ibv_srq_pingpong, ibv_ud_pingpong
#    with -g 0 (a GRH to the peer's link-local GID: ibd fills in the
#    destination MAC from it, as Linux does for link-local GIDs), the data
#    checked (-c);
#  - perftest's ib_write_bw, ib_read_bw, ib_send_lat, ib_atomic_bw with
#    -x 0 (GID index 0): both ends exit 0 and print their results;
#  - ibd A's cable captured (--pcap): tshark reads every frame as RoCEv2
#    (Ethernet, IPv6, UDP 4791, InfiniBand) with none malformed.
# Servers run on ibd A, clients on ibd B; both sides must exit 0.
#   roce_verbs.sh IBD ABI_DIR
set -euo pipefail
IBD=$1 ABI=$2
work=$(mktemp -d "${TMPDIR:-/tmp}/roce-verbs-XXXXXX")
# shellcheck source=../../scripts/ibd_pair.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/ibd_pair.sh"
cleanup() {
  stop_daemons
  rm -rf "$work"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*"
  echo "--- ibd a (tail)"; tail -20 "$work/a.log" 2>/dev/null || true
  echo "--- ibd b (tail)"; tail -20 "$work/b.log" 2>/dev/null || true
  exit 1
}
for t in ibv_devinfo ibv_rc_pingpong ib_write_bw tshark; do
  command -v "$t" >/dev/null || fail "$t not found (scripts/setup.sh installs it)"
done

eth=(--simhca-arg=--link-layer --simhca-arg=ethernet)
pa=$(free_port)
pb=$pa
while ((pb == pa)); do pb=$(free_port); done
PID_A='' PID_B=''
start_ibd a 1 "$pa" "$pb" PID_A "${eth[@]}" --simhca-arg=--guid --simhca-arg=0x0002c90300000a00 --pcap "$work/a.pcap"
start_ibd b 2 "$pb" "$pa" PID_B "${eth[@]}" --simhca-arg=--guid --simhca-arg=0x0002c90300000b00
SA=$work/a.sock SB=$work/b.sock
export LD_LIBRARY_PATH=$ABI:$ABI/../lib

# ---- the port as libibverbs shows it ------------------------------------------------
info=$(OPENIB_SOCKET=$SA timeout 30 ibv_devinfo -v) || fail "ibv_devinfo -v: $info"
field() { awk -v f="$1:" '$1 == f { print $2; exit }' <<<"$info"; }
[[ $(field link_layer) == Ethernet ]] || fail "ibv_devinfo: link_layer is '$(field link_layer)', not Ethernet"
[[ $(field state) == PORT_ACTIVE ]] || fail "ibv_devinfo: port state '$(field state)'"
[[ $(field port_lid) == 0 ]] || fail "ibv_devinfo: port_lid '$(field port_lid)', not 0"
[[ $(field active_mtu) == 1024 ]] || fail "ibv_devinfo: active_mtu '$(field active_mtu)'"
# GUID 0x0002c90300000a00 + port 1 -> MAC 02:03:00:00:0a:01 -> fe80::3:ff:fe00:a01
grep -Eq 'GID\[ *0\]:[[:space:]]+fe80::3:ff:fe00:a01, RoCE v2' <<<"$info" ||
  fail "ibv_devinfo -v: GID 0 is not fe80::3:ff:fe00:a01 of type RoCE v2: $(grep 'GID\[' <<<"$info")"
echo "ok: ibv_devinfo -v: Ethernet, PORT_ACTIVE, LID 0, MTU 1024, GID 0 fe80::3:ff:fe00:a01 RoCE v2"

# ---- ping-pongs and perftest --------------------------------------------------------
# shellcheck source=run_pair.sh
source "$(dirname "${BASH_SOURCE[0]}")/run_pair.sh"
pp() {
  run_pair 60 "$@"
  grep -q "iters in" "$work/cli.log" && grep -q "iters in" "$work/srv.log" ||
    fail "$*: no result line: $(cat "$work/srv.log" "$work/cli.log")"
  grep -q "GID fe80::3:ff:fe00:a01" "$work/cli.log" || fail "$*: the client did not address ibd A's GID"
  echo "ok: $*: $(grep 'iters in' "$work/cli.log")"
}
for prog in ibv_rc_pingpong ibv_uc_pingpong ibv_srq_pingpong; do
  pp "$prog" -g 0 -c -n 100 -s 4096
done
pp ibv_ud_pingpong -g 0 -c -n 100 -s 1024
pt() {
  run_pair 120 "$@"
  grep -Eq '^ *[0-9]+ +[0-9]+ ' "$work/cli.log" || fail "$*: no results line: $(cat "$work/cli.log")"
  echo "ok: $*: $(grep -E '^ *[0-9]+ +[0-9]+ ' "$work/cli.log" | tail -1 | tr -s ' ')"
}
pt ib_write_bw -x 0 -s 65536 -n 200
pt ib_read_bw -x 0 -s 65536 -n 200
pt ib_send_lat -x 0 -s 8 -n 500
pt ib_atomic_bw -x 0 -n 200

# ---- the capture ---------------------------------------------------------------------
stop_daemons  # flushes and closes the capture
# Payload heuristics (RPC-over-RDMA, SMB Direct, ...) read perftest's
# arbitrary payloads as their protocols: off, as in capture_test.sh.
heur=()
for h in rpcrdma_infiniband smb_direct_infiniband nvme_rdma iser_infiniband lnet_ib smcr_infiniband \
  sdp_infiniband fc_infiniband mellanox_eoib eth_over_ib; do heur+=(--disable-heuristic "$h"); done
frames=$(tshark -n -r "$work/a.pcap" "${heur[@]}" -o udp.ignore_ipv6_zero_checksum:TRUE -T fields -e frame.protocols \
  -e udp.dstport -e _ws.malformed 2>/dev/null) || fail "tshark could not read $work/a.pcap"
total=$(grep -c . <<<"$frames" || true)
roce=$(awk -F'\t' '$1 ~ /^eth:ethertype:ipv6:udp:infiniband/ && $2 == 4791 && $3 == ""' <<<"$frames" | wc -l)
((total > 1000)) || fail "only $total frames captured"
((roce == total)) || fail "$((total - roce)) of $total captured frames are not clean RoCEv2: $(awk -F'\t' '{print $1}' <<<"$frames" | sort | uniq -c)"
echo "ok: capture of ibd A's cable: $total frames, every one RoCEv2 over IPv6 to UDP 4791, none malformed"
echo "roce-verbs: all checks passed"
