#!/usr/bin/env bash
# Issue 18: address resolution and the RDMA CM (docs/arp.md, docs/cma.md) on
# the sandbox (net.2sw2path4hca, Debian's OpenSM) with IPoIB up on every
# host; the peers are named by the IP addresses of their ib0:
#  - openib-rping across both switches, data verified, over IPv4 and IPv6;
#    openib-udaddy (UD through SIDR); openib-mckey (one sender, three
#    receivers);
#  - an address nobody has -> ADDR_ERROR after the ARP module's retries; a
#    port nobody listens on -> REJECTED; the server killed mid-transfer ->
#    DISCONNECTED on the client; an address removed from ib0 -> ADDR_CHANGE
#    on the id bound to it;
#  - 1,000 concurrent connects to one listener (openib-cmtime), all
#    established and torn down, no id left in either ibd;
#  - an unprivileged client binding port 100 -> EACCES; two binds of one
#    port -> EADDRINUSE;
#  - issue 29: a server bound to 127.0.0.1 is out of another host's reach
#    (REJECTED), a REQ whose header names the loopback address is refused
#    even from the host itself, as Linux's rdma_cm refuses it, and so is a
#    REQ from another host claiming one of the server's addresses as its
#    source or naming an address the server does not have (docs/cma.md
#    "Security"; counted as cma.requests_bad_address).
#   cma.sh BUILD_DIR  (OPENIB_SANDBOX_PREFIX: the sandbox's names, sbxcma)
set -euo pipefail
build=$(cd "$1" && pwd)
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
topo=/usr/share/doc/ibsim-utils/net-examples/net.2sw2path4hca
# shellcheck source=lib.sh
source "$here/lib.sh"
sandbox_test "${OPENIB_SANDBOX_PREFIX:-sbxcma}" 198.18.32 cma-test
# 1,000 connections: more QPs per client and uid than the default quota.
# A 0666 socket: user nobody binds too (through a link in a directory it can reach).
export OPENIB_SANDBOX_IBD_ARGS="--ipoib ib0 --client-max-qps 4000 --uid-max-qps 4000 --socket-mode 0666"
# shellcheck source=../../scripts/unprivileged.sh
source "$here/../../scripts/unprivileged.sh"
nb=$(mktemp -d)
chmod 755 "$nb"
ex=$build/examples
cleanup_cma() {
  kill_bg
  sandbox_cleanup
  rm -rf "$nb"
}
trap cleanup_cma EXIT
hosts=(Hca1 Hca2 Hca3 Hca4)
declare -A ip4
for i in 1 2 3 4; do ip4[Hca$i]=198.19.32.$((10 + i)); done
# finish NAME PID: waits for PID (bounded by the example's own timeouts); its status in rc.
finish() {
  rc=0
  wait "$2" || rc=$?
}
cma_counters() { ibdctl_counters "$1" | grep -E '^(cma|arp)\.' | grep -v ' 0$' | tr '\n' ' '; }

sb up "$topo" --sm Hca1 || fail "sandbox up"
for h in "${hosts[@]}"; do ib0_up "$h" "${ip4[$h]}/24"; done
ok "ib0 up with an address on every host"

# --- rping across both switches, by IP address, data verified --------------
bg rping-server Hca2 "$ex/openib-rping" -s -a "${ip4[Hca2]}" -p 7174 -V
srv=$bg
waitfor rping-server "listening on"
out=$(sb run Hca1 "$ex/openib-rping" -c -a "${ip4[Hca2]}" -p 7174 -C 200 -S 4096 -V -v 2>&1) ||
  fail "rping client: $out
server: $(cat "$(log_of rping-server)")
Hca1: $(cma_counters Hca1)
Hca2: $(cma_counters Hca2)"
finish rping-server "$srv"
((rc == 0)) || fail "rping server exited $rc: $(cat "$(log_of rping-server)")"
grep -q 'ping data: rdma-ping-199: ' <<<"$out" || fail "rping -v printed no 200th ping: $(tail -3 <<<"$out")"
grep -q '200 iterations' <<<"$out" || fail "rping client's summary: $(tail -3 <<<"$out")"
ok "rping Hca1 -> ${ip4[Hca2]}:7174 (across both switches): 200 x 4 KiB verified: $(tail -1 <<<"$out")"

# --- the same over IPv6 (neighbour discovery instead of ARP) -------------------
for h in Hca1 Hca2 Hca3; do sb run "$h" ip -6 addr add "fd00:198:19:32::${ip4[$h]##*.}/64" dev ib0 nodad; done
# Hca2's solicited-node group joined (its MLD report, then the SA join):
# Hca3 reaches it; Hca1 has no neighbour entry yet, so its ibd makes the
# kernel run neighbour discovery.
ping6_3() { sb run Hca3 ping -6 -c 1 -W 1 fd00:198:19:32::12; }
until_ok 25 ping6_3 || fail "Hca3 cannot ping6 Hca2: $(ping6_3 2>&1 | tail -2)"
bg rping6-server Hca2 "$ex/openib-rping" -s -a fd00:198:19:32::12 -p 7180 -V
srv=$bg
waitfor rping6-server "listening on"
out=$(sb run Hca1 "$ex/openib-rping" -c -a fd00:198:19:32::12 -p 7180 -C 20 -S 1024 -V 2>&1) ||
  fail "rping over IPv6: $out
server: $(cat "$(log_of rping6-server)")
Hca1: $(cma_counters Hca1)"
finish rping6-server "$srv"
((rc == 0)) || fail "rping server (IPv6) exited $rc: $(cat "$(log_of rping6-server)")"
ok "rping Hca1 -> [fd00:198:19:32::12]:7180 (IPv6, ND): $(tail -1 <<<"$out")"

# --- udaddy: UD through SIDR -------------------------------------------------
bg udaddy-server Hca2 "$ex/openib-udaddy" -b "${ip4[Hca2]}" -p 7175 -C 50
srv=$bg
waitfor udaddy-server "listening on"
out=$(sb run Hca3 "$ex/openib-udaddy" -s "${ip4[Hca2]}" -p 7175 -C 50 2>&1) ||
  fail "udaddy client: $out
server: $(cat "$(log_of udaddy-server)")"
finish udaddy-server "$srv"
((rc == 0)) || fail "udaddy server exited $rc: $(cat "$(log_of udaddy-server)")"
grep -q 'Q_Key 0x01234567' <<<"$out" || fail "udaddy: Q_Key not RDMA_UDP_QKEY: $out"
ok "udaddy Hca3 -> ${ip4[Hca2]}:7175: $(tail -1 <<<"$out")"

# --- mckey: one sender, three receivers ----------------------------------------
group=239.1.2.3
rpids=()
for h in Hca2 Hca3 Hca4; do
  bg "mckey-$h" "$h" "$ex/openib-mckey" -m "$group" -b "${ip4[$h]}" -C 100 --timeout 20
  rpids+=("$bg")
done
for h in Hca2 Hca3 Hca4; do waitfor "mckey-$h" "joined"; done
out=$(sb run Hca1 "$ex/openib-mckey" -s -m "$group" -b "${ip4[Hca1]}" -C 100 --start-delay 500 2>&1) ||
  fail "mckey sender: $out"
i=0
for h in Hca2 Hca3 Hca4; do
  finish "mckey-$h" "${rpids[$i]}"
  i=$((i + 1))
  ((rc == 0)) || fail "mckey receiver on $h exited $rc: $(cat "$(log_of "mckey-$h")")"
  grep -q 'received 100 of 100' "$(log_of "mckey-$h")" || fail "mckey on $h: $(cat "$(log_of "mckey-$h")")"
done
ok "mckey $group: 100 messages from Hca1 received whole on Hca2, Hca3, Hca4"

# --- errors -----------------------------------------------------------------------
t0=$(date +%s)
out=$(sb run Hca1 "$ex/openib-rping" -c -a 198.19.32.99 -p 7174 -C 1 2>&1) && fail "rping to nobody succeeded: $out"
t1=$(date +%s)
grep -q 'RDMA_CM_EVENT_ADDR_ERROR' <<<"$out" || fail "rping to nobody: $out"
arp_retries=$(counter Hca1 arp.retries)
((arp_retries >= 2)) || fail "ARP retried $arp_retries times: $(cma_counters Hca1)"
ok "198.19.32.99 (nobody): ADDR_ERROR after $((t1 - t0)) s and $arp_retries retries: $(grep ADDR_ERROR <<<"$out" | head -1)"

out=$(sb run Hca1 "$ex/openib-rping" -c -a "${ip4[Hca3]}" -p 7999 -C 1 2>&1) && fail "rping to a closed port succeeded: $out"
grep -q 'RDMA_CM_EVENT_REJECTED' <<<"$out" || fail "rping to a closed port: $out"
ok "port 7999 with no listener: $(grep REJECTED <<<"$out" | head -1)"

# The server killed mid-transfer: the client hears DISCONNECTED.
bg rping-victim Hca4 "$ex/openib-rping" -s -a "${ip4[Hca4]}" -p 7176
victim=$bg
waitfor rping-victim "listening on"
bg rping-long Hca1 "$ex/openib-rping" -c -a "${ip4[Hca4]}" -p 7176 -C 1000000 -S 1024 -v
long=$bg
waitfor rping-long 'rdma-ping-50:' 300
kill -9 "$victim"
finish rping-long "$long"
((rc != 0)) || fail "rping client survived its server's death: $(tail -3 "$(log_of rping-long)")"
grep -q 'server disconnected' "$(log_of rping-long)" ||
  fail "rping client after its server died (no DISCONNECTED event): $(tail -c 600 "$(log_of rping-long)")"
for _ in $(seq 50); do [[ $(counter Hca4 cma.ids) == 0 ]] && break; sleep 0.1; done
[[ $(counter Hca4 cma.ids) == 0 ]] || fail "the killed server's ibd holds $(counter Hca4 cma.ids) RDMA CM ids"
ok "server SIGKILLed mid-transfer: its ids torn down (cma.ids 0 on Hca4), the client got DISCONNECTED ($(grep -c 'ping data' "$(log_of rping-long)") pings before)"

# An address removed from ib0: the id bound to it gets ADDR_CHANGE.
sb run Hca3 ip addr add 198.19.32.53/24 dev ib0
bg rping-bound Hca3 "$ex/openib-rping" -s -a 198.19.32.53 -p 7177 --timeout 30
bound=$bg
waitfor rping-bound "listening on"
sb run Hca3 ip addr del 198.19.32.53/24 dev ib0
waitfor rping-bound 'RDMA_CM_EVENT_ADDR_CHANGE' 100
kill "$bound" 2>/dev/null || true
ok "198.19.32.53 removed from Hca3's ib0: the listener bound to it got ADDR_CHANGE"

# Issue 29 (docs/cma.md "Security"). refused_by_hca2 FROM WHAT RPING-ARGS...:
# openib-rping -c from FROM is REJECTED with reason 28 by Hca2's RDMA CM,
# which counts it as cma.requests_bad_address.
refused_by_hca2() {
  local from=$1 what=$2 out b0 b1
  shift 2
  b0=$(counter Hca2 cma.requests_bad_address)
  out=$(sb run "$from" "$ex/openib-rping" -c "$@" -C 1 2>&1) && fail "$what: taken: $out"
  grep -q 'RDMA_CM_EVENT_REJECTED status 28' <<<"$out" || fail "$what: $out"
  b1=$(counter Hca2 cma.requests_bad_address)
  ((b1 == b0 + 1)) || fail "$what: cma.requests_bad_address on Hca2 $b0, then $b1"
  ok "$what: $(grep -m1 REJECTED <<<"$out"), counted"
}
# A service bound to 127.0.0.1 is Hca2's own. Another host that connects to
# Hca2's address finds no listener on that port; a REQ naming 127.0.0.1 in
# its header (here Hca2's own rping's, resolved to its own port) is refused
# before any listener is looked for.
bg rping-lo Hca2 "$ex/openib-rping" -s -a 127.0.0.1 -p 7179 --timeout 30
lo=$bg
waitfor rping-lo "listening on"
out=$(sb run Hca1 "$ex/openib-rping" -c -a "${ip4[Hca2]}" -p 7179 -C 1 2>&1) && fail "rping from Hca1 reached a service on Hca2's 127.0.0.1: $out"
grep -q 'RDMA_CM_EVENT_REJECTED' <<<"$out" || fail "rping from Hca1 to Hca2's loopback service: $out"
ok "a server on 127.0.0.1 of Hca2, from Hca1: $(grep -m1 REJECTED <<<"$out")"
refused_by_hca2 Hca2 "a REQ naming 127.0.0.1 (Hca2 to itself)" -a 127.0.0.1 -p 7179
kill "$lo" 2>/dev/null || true
# A source that is Hca2's own address, claimed by Hca1 (which carries a
# duplicate of it: the header's source is the client's bound address): the
# REQ comes from another GID than Hca2's, so it is refused.
sb run Hca2 ip addr add 198.19.32.70/24 dev ib0
sb run Hca1 ip addr add 198.19.32.70/24 dev ib0
bg rping-any Hca2 "$ex/openib-rping" -s -p 7181 --timeout 30
any=$bg
waitfor rping-any "listening on"
refused_by_hca2 Hca1 "Hca1 claiming Hca2's address 198.19.32.70 as its source" -a "${ip4[Hca2]}" -I 198.19.32.70 -p 7181
sb run Hca1 ip addr del 198.19.32.70/24 dev ib0
sb run Hca2 ip addr del 198.19.32.70/24 dev ib0
# A destination that is no address of Hca2's: Hca1's neighbour table sends
# 198.19.32.80 to Hca2's GID (a static entry with Hca2's link-layer
# address), so the REQ reaches Hca2's wildcard listener naming an address
# Hca2 does not have: refused (Linux: no net_dev for it).
mac=$(sb run Hca1 ip neigh show "${ip4[Hca2]}" dev ib0 | awk '{for (i = 1; i < NF; i++) if ($i == "lladdr") print $(i + 1)}')
[[ -n $mac ]] || fail "Hca1 has no neighbour entry for ${ip4[Hca2]}: $(sb run Hca1 ip neigh show dev ib0)"
sb run Hca1 ip neigh replace 198.19.32.80 lladdr "$mac" dev ib0 nud permanent
refused_by_hca2 Hca1 "a REQ to Hca2's GID naming 198.19.32.80, no address of Hca2's" -a 198.19.32.80 -p 7181
sb run Hca1 ip neigh del 198.19.32.80 dev ib0
kill "$any" 2>/dev/null || true

# Ports: below 1024 for root only; one port, one bind.
# The build tree may be out of nobody's reach (a clone under /root): a copy,
# and a hard link to Hca2's ibd socket (its directory is root's).
reachable_copy "$nb/bin" "$ex/openib-rping"
ln "$OPENIB_SANDBOX/Hca2/ibd.sock" "$nb/ibd.sock"
out=$(sb run Hca2 "${AS_NOBODY[@]}" env LD_LIBRARY_PATH="$nb/bin/lib" "$nb/bin/openib-rping" --socket "$nb/ibd.sock" \
  -s -a "${ip4[Hca2]}" -p 100 2>&1) && fail "an unprivileged client bound port 100: $out"
grep -q 'below 1024.*Permission denied' <<<"$out" || fail "unprivileged bind of port 100: $out"
ok "an unprivileged client binding port 100: $(grep -m1 'denied\|EACCES' <<<"$out")"
bg rping-first Hca2 "$ex/openib-rping" -s -a "${ip4[Hca2]}" -p 7178 --timeout 30
first=$bg
waitfor rping-first "listening on"
out=$(sb run Hca2 "$ex/openib-rping" -s -p 7178 2>&1) && fail "a second bind of port 7178 succeeded: $out"
grep -q 'Address already in use\|EADDRINUSE' <<<"$out" || fail "a second bind of port 7178: $out"
kill "$first" 2>/dev/null || true
ok "a second bind of port 7178 (wildcard over ${ip4[Hca2]}): $(grep -m1 'in use\|EADDRINUSE' <<<"$out")"

# --- 1,000 concurrent connects to one listener ----------------------------------------
bg cmtime-server Hca2 "$ex/openib-cmtime" -b "${ip4[Hca2]}" -p 7471 -c 1000 --timeout 60
srv=$bg
waitfor cmtime-server "listening on"
out=$(sb run Hca1 "$ex/openib-cmtime" -s "${ip4[Hca2]}" -p 7471 -c 1000 --timeout 60 2>&1) ||
  fail "cmtime client: $out
server: $(tail -5 "$(log_of cmtime-server)")
Hca1: $(cma_counters Hca1)
Hca2: $(cma_counters Hca2)"
finish cmtime-server "$srv"
((rc == 0)) || fail "cmtime server exited $rc: $(tail -5 "$(log_of cmtime-server)")"
for h in Hca1 Hca2; do
  for c in cma.ids cm.ids; do
    n=$(counter "$h" "$c")
    [[ $n == 0 ]] || fail "$h holds $n $c after the 1,000 connections"
  done
done
ok "1,000 concurrent connects Hca1 -> ${ip4[Hca2]}:7471 established and torn down; no id left: $(grep -m1 'conn/s' <<<"$out")"
