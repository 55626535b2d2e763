#!/usr/bin/env bash
# Issue 16: IPoIB over TAP (docs/ipoib.md) on the sandbox (net.2sw2path4hca,
# Debian's OpenSM): every host's ibd runs with --ipoib ib0; the kernel's
# own tools (ping, ip neigh, iperf3, a UDP multicast socket) run over it in
# the hosts' namespaces; tshark decodes the cables' captures; a cable is
# pulled and OpenSM restarted; ATS ServiceRecords follow the addresses;
# garbage frames are dropped and counted; user nobody's forged ARP replies
# poison no host's neighbour table, with IPoIB's Q_Key 0x0b1b (the bridge's
# source checks) and with a controlled one (issue 29, finding 11).
#   ipoib.sh BUILD_DIR
set -euo pipefail
build=$(cd "$1" && pwd)
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
topo=/usr/share/doc/ibsim-utils/net-examples/net.2sw2path4hca
# shellcheck source=lib.sh
source "$here/lib.sh"
sandbox_test sbxip 198.18.22 ipoib-test
# A 0666 socket: user nobody is a client too (the forged ARP section).
export OPENIB_SANDBOX_IBD_ARGS="--ipoib ib0 --socket-mode 0666"
# shellcheck source=../../scripts/unprivileged.sh
source "$here/../../scripts/unprivileged.sh"
nb=$(mktemp -d)
chmod 755 "$nb"
osm_pid=
export OPENIB_SANDBOX_PCAP_DIR=$OPENIB_SANDBOX.pcap
mkdir -p "$OPENIB_SANDBOX_PCAP_DIR"
iperf_pid=''
cleanup_ipoib() {
  [[ -n $iperf_pid ]] && kill "$iperf_pid" 2>/dev/null
  [[ -n $osm_pid ]] && { kill "$osm_pid" 2>/dev/null || true; }
  rm -rf "$nb"
  sandbox_cleanup
  rm -rf "$OPENIB_SANDBOX_PCAP_DIR"
}
trap cleanup_ipoib EXIT
hosts=(Hca1 Hca2 Hca3 Hca4)
declare -A ip4
for i in 1 2 3 4; do ip4[Hca$i]=198.19.22.$((10 + i)); done
ipoib_json() { "$build/src/tools/ibdctl" --socket "$OPENIB_SANDBOX/$1/ibd.sock" ipoib --json; }
carrier() { sb run "$1" cat /sys/class/net/ib0/carrier 2>/dev/null || echo none; }
# until_ok TRIES CMD...: CMD until it succeeds, 0.2 s apart.
until_ok() {
  local n=$1
  shift
  for _ in $(seq "$n"); do "$@" >/dev/null 2>&1 && return 0; sleep 0.2; done
  return 1
}
has_carrier() { [[ $(carrier "$1") == 1 ]]; }
no_carrier() { [[ $(carrier "$1") == 0 ]]; }
ping4() { sb run "$1" ping -c 1 -W 1 "${@:3}" "$2"; }

sb up "$topo" --sm Hca1 || fail "sandbox up"

# --- every host: ib0 exists (created down, as Linux's ib0), and once it is
# up it has its carrier: the broadcast group is joined
has_ib0() { sb run "$1" ip link show ib0; }
for h in "${hosts[@]}"; do
  until_ok 150 has_ib0 "$h" || fail "$h: no ib0: $(grep ipoib "$OPENIB_SANDBOX/$h/ibd.log" | tail -5)"
  sb run "$h" ip addr add "${ip4[$h]}/24" dev ib0
  sb run "$h" ip link set ib0 up
  until_ok 150 has_carrier "$h" || fail "$h: ib0 has no carrier: $(carrier "$h")
$(grep ipoib "$OPENIB_SANDBOX/$h/ibd.log" | tail -5)"
done
mtu=$(sb run Hca1 cat /sys/class/net/ib0/mtu)
[[ $mtu == 2044 ]] || fail "ib0's MTU is $mtu, not 2044 (the broadcast group's 2048 - 4)"
ok "ib0 on every host: carrier on, MTU $mtu"

# --- IPv4 between every pair, across both switches; ip neigh shows them ---
for a in "${hosts[@]}"; do
  for b in "${hosts[@]}"; do
    [[ $a == "$b" ]] && continue
    until_ok 25 ping4 "$a" "${ip4[$b]}" || fail "ping $a -> $b (${ip4[$b]}): $(ping4 "$a" "${ip4[$b]}" 2>&1 | tail -2)
$(ipoib_json "$a")"
  done
  n=$(sb run "$a" ip neigh show dev ib0 | grep -c 'lladdr .* REACHABLE\|lladdr .* STALE\|lladdr .* DELAY')
  ((n >= 3)) || fail "$a: ip neigh shows $n peers: $(sb run "$a" ip neigh show dev ib0)"
done
ok "IPv4 ping between all 12 ordered pairs; ip neigh shows the 3 peers on each host"

# --- IPv6 link-local between every pair ------------------------------------
declare -A ll
for h in "${hosts[@]}"; do
  for _ in $(seq 50); do
    ll[$h]=$(sb run "$h" ip -6 -o addr show dev ib0 scope link | awk '!/tentative/ {sub(/\/.*/, "", $4); print $4}')
    [[ -n ${ll[$h]} ]] && break
    sleep 0.2
  done
  [[ -n ${ll[$h]} ]] || fail "$h: no IPv6 link-local address past DAD: $(sb run "$h" ip -6 addr show dev ib0)"
done
ping6() { sb run "$1" ping -6 -c 1 -W 1 "$2%ib0"; }
for a in "${hosts[@]}"; do
  for b in "${hosts[@]}"; do
    [[ $a == "$b" ]] && continue
    until_ok 25 ping6 "$a" "${ll[$b]}" || fail "ping -6 $a -> $b (${ll[$b]}): $(ping6 "$a" "${ll[$b]}" 2>&1 | tail -2)"
  done
done
ok "IPv6 link-local ping between all 12 ordered pairs"

# --- sizes up to the MTU; DF above it: the kernel's "message too long" -----
ping4 Hca1 "${ip4[Hca3]}" -M do -s $((mtu - 28)) >/dev/null || fail "a $mtu-byte packet with DF did not pass"
if out=$(ping4 Hca1 "${ip4[Hca3]}" -M do -s $((mtu - 27)) 2>&1); then fail "a $((mtu + 1))-byte packet with DF passed: $out"; fi
grep -qi "too long\|mtu" <<<"$out" || fail "no frag-needed error for $((mtu + 1)) bytes with DF: $out"
ping4 Hca1 "${ip4[Hca3]}" -s 6000 >/dev/null || fail "a 6000-byte ping (fragmented by the kernel) did not pass"
ok "$mtu bytes with DF pass; $((mtu + 1)) with DF: '$(grep -oi 'message too long.*' <<<"$out" | head -1)'; 6000 bytes fragmented pass"

# --- iperf3 TCP and UDP -----------------------------------------------------
sb run Hca3 iperf3 -s -1 -B "${ip4[Hca3]}" >"$OPENIB_SANDBOX/iperf-s.log" 2>&1 &
iperf_pid=$!
until_ok 50 sb run Hca3 ss -Hltn "sport = :5201" || fail "iperf3 server does not listen"
# 20 MB, not a duration: every cable is captured (the tshark section), and
# a second at full speed is ~100 MB of capture per cable to dissect.
out=$(sb run Hca1 timeout 60 iperf3 -c "${ip4[Hca3]}" -n 20M -J) || fail "iperf3 TCP: $out"
# (a JSON without the sum: iperf3 said why in "error"; both logs go in the failure)
tcp=$(python3 -c 'import json,sys; print(round(json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"]/1e6))' <<<"$out") ||
  fail "iperf3 TCP: no result: $out
server: $(cat "$OPENIB_SANDBOX/iperf-s.log")"
((tcp > 0)) || fail "iperf3 TCP moved nothing"
wait "$iperf_pid" || true
sb run Hca3 iperf3 -s -1 -B "${ip4[Hca3]}" >"$OPENIB_SANDBOX/iperf-s.log" 2>&1 &
iperf_pid=$!
until_ok 50 sb run Hca3 ss -Hlun "sport = :5201" || until_ok 50 sb run Hca3 ss -Hltn "sport = :5201" || fail "iperf3 server does not listen again"
out=$(sb run Hca1 timeout 30 iperf3 -c "${ip4[Hca3]}" -u -b 50M -l 1400 -t 1 -J) || fail "iperf3 UDP: $out"
res=$(python3 -c 'import json,sys; s=json.load(sys.stdin)["end"]["sum"]; print(round(s["bits_per_second"]/1e6), s["lost_percent"])' <<<"$out") ||
  fail "iperf3 UDP: no result: $out
server: $(cat "$OPENIB_SANDBOX/iperf-s.log")"
read -r udp lost <<<"$res"
wait "$iperf_pid" || true
iperf_pid=''
ok "iperf3 Hca1 -> Hca3: TCP $tcp Mbit/s; UDP $udp Mbit/s offered 50, $lost % lost"

# --- UDP multicast: a group joined by two of the four hosts ---------------
group=239.1.2.3
recv_py='import socket,struct,sys
s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)
s.bind(("",5555))
s.setsockopt(socket.IPPROTO_IP,socket.IP_ADD_MEMBERSHIP,struct.pack("4s4s",socket.inet_aton(sys.argv[1]),socket.inet_aton(sys.argv[2])))
s.settimeout(4)
n=0
try:
  while True:
    s.recv(2000); n+=1
except socket.timeout: pass
print(n)'
send_py='import socket,sys,time
s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)
s.setsockopt(socket.IPPROTO_IP,socket.IP_MULTICAST_IF,socket.inet_aton(sys.argv[2]))
for i in range(100):
  s.sendto(b"x"*200,(sys.argv[1],5555)); time.sleep(0.005)'
rx_before=$(ipoib_json Hca4 | python3 -c 'import json,sys; print(json.load(sys.stdin)["counters"]["ib_rx"])')
sb run Hca2 python3 -c "$recv_py" "$group" "${ip4[Hca2]}" >"$OPENIB_SANDBOX/m2.out" &
m2=$!
sb run Hca3 python3 -c "$recv_py" "$group" "${ip4[Hca3]}" >"$OPENIB_SANDBOX/m3.out" &
m3=$!
sleep 1  # the receivers' IGMP reports reach their ibds, which join
sb run Hca1 python3 -c "$send_py" "$group" "${ip4[Hca1]}"
wait "$m2" "$m3"
rx_after=$(ipoib_json Hca4 | python3 -c 'import json,sys; print(json.load(sys.stdin)["counters"]["ib_rx"])')
n2=$(cat "$OPENIB_SANDBOX/m2.out") n3=$(cat "$OPENIB_SANDBOX/m3.out")
((n2 >= 90 && n3 >= 90)) || fail "multicast receivers got $n2 and $n3 of 100 datagrams"
((rx_after - rx_before < 50)) || fail "Hca4 (no member of $group) received $((rx_after - rx_before)) IPoIB packets meanwhile"
ok "UDP multicast $group: members Hca2 and Hca3 got $n2 and $n3 of 100; Hca4 (no member) $((rx_after - rx_before)) IPoIB packets in all"

# --- OpenSM restarted: groups joined again, ping works ---------------------
sb sm Hca1 stop
sb sm Hca1 start || fail "OpenSM on Hca1 again"
until_ok 150 ping4 Hca4 "${ip4[Hca2]}" || fail "no ping Hca4 -> Hca2 after OpenSM restarted"
sb run Hca4 ip neigh flush dev ib0
until_ok 75 ping4 Hca4 "${ip4[Hca3]}" || fail "no ARP + ping Hca4 -> Hca3 after OpenSM restarted (broadcast group not rejoined?)"
ok "OpenSM restarted: broadcast group rejoined, ARP and ping work again"

# --- ATS: an address added appears in saquery -S; removed, it goes ---------
records() { sb run "$1" saquery --smkey 1 "$2" 2>/dev/null | awk '/dump:$/ {if (r) print r; r=""; next} {gsub(/[ \t]+/, " "); r = r $0} END {if (r) print r}'; }
# ats_re A.B.C.D: an ATS record's ServiceData8 bytes 13..16 as saquery prints them (DAPL: IPv4 at 12..15).
ats_re() {
  local IFS=. n=13 re='' b
  for b in $1; do re+="ServiceData8\\.$n\\.*$(printf '0x%X' "$b") "; n=$((n + 1)); done
  echo "$re"
}
ats_has() { records Hca4 -S | grep "DAPL Address Translation Service" | grep -qE "$(ats_re "$1")"; }
t0=$EPOCHREALTIME
sb run Hca2 ip addr add 198.19.23.2/24 dev ib0
until_ok 50 ats_has 198.19.23.2 || fail "no ATS record for 198.19.23.2 in saquery -S: $(records Hca4 -S | grep -c DAPL) records"
ok "ATS record for 198.19.23.2 in saquery -S after $(python3 -c "print(round($EPOCHREALTIME - $t0, 2))") s"
sb run Hca2 ip addr del 198.19.23.2/24 dev ib0
for _ in $(seq 50); do ats_has 198.19.23.2 || break; sleep 0.2; done
if ats_has 198.19.23.2; then fail "the ATS record of 198.19.23.2 stayed after the address went"; fi
ok "the address removed: its ATS record is gone from saquery -S"

# --- garbage frames into the TAP: dropped and counted, nothing breaks -----
garbage_py='import socket,os,random
s=socket.socket(socket.AF_PACKET,socket.SOCK_RAW)
s.bind(("ib0",0))
random.seed(7)
me=open("/sys/class/net/ib0/address").read().strip().replace(":","")
src=bytes.fromhex(me)
for i in range(300):
  kind=i%4
  if kind==0: f=b"\xff"*6+src+b"\x88\xb5"+os.urandom(random.randint(0,200))          # unknown EtherType
  elif kind==1: f=b"\xff"*6+src+b"\x08\x06"+os.urandom(random.randint(0,27))         # truncated ARP
  elif kind==2: f=b"\xff"*6+src+b"\x86\xdd"+os.urandom(random.randint(0,60))         # bad IPv6
  else: f=os.urandom(random.randint(14,2100))
  try: s.send(f)
  except OSError: pass'
read -r mal0 et0 <<<"$(ipoib_json Hca3 | python3 -c 'import json,sys; c=json.load(sys.stdin)["counters"]; print(c["drop_malformed_frame"], c["drop_ethertype"])')"
sb run Hca3 python3 -c "$garbage_py"
sleep 0.5
read -r mal1 et1 <<<"$(ipoib_json Hca3 | python3 -c 'import json,sys; c=json.load(sys.stdin)["counters"]; print(c["drop_malformed_frame"], c["drop_ethertype"])')"
((et1 - et0 >= 75)) || fail "unknown EtherTypes dropped: $((et1 - et0)) of at least 75"
((mal1 - mal0 >= 50)) || fail "malformed frames dropped: $((mal1 - mal0))"
kill -0 "$(cat "$OPENIB_SANDBOX/Hca3/ibd.pid")" || fail "Hca3's ibd died on garbage frames"
for b in Hca1 Hca2 Hca4; do until_ok 25 ping4 Hca3 "${ip4[$b]}" || fail "ping Hca3 -> $b after the garbage"; done
ok "300 garbage frames on Hca3's ib0: $((et1 - et0)) unknown EtherTypes, $((mal1 - mal0)) malformed dropped; ping still works"

# --- garbage UD packets to Hca3's IPoIB QP: dropped and counted -----------
# openib-ud-garbage (ud_garbage.cpp) on Hca1 sends SENDs of every kind the
# receive path must refuse, 16 at a time (Hca3's QP keeps 1024 receives
# posted). Its last line says how many it sent that must be dropped as
# malformed and as unknown EtherTypes (the rest: random bytes under a known
# EtherType, which may parse). UD may lose a packet, so the counters must
# grow by 9/10 of those at least; without the drops counted they would not
# grow at all (nothing else sends Hca3 malformed packets).
ug_counts() {
  ipoib_json Hca3 | python3 -c 'import json,sys; c=json.load(sys.stdin)["counters"]
print(c["drop_malformed_packet"], c["drop_ethertype"], c["ib_rx"], sum(v for k, v in c.items() if k.startswith("drop_")))'
}
read -r ug_qpn ug_qkey <<<"$(ipoib_json Hca3 | python3 -c 'import json,sys; j=json.load(sys.stdin); print(int(j["qpn"], 16), int(j["qkey"], 16))')"
ug_lid=$(lid_of Hca3)
read -r ug_mp0 ug_et0 ug_rx0 ug_all0 <<<"$(ug_counts)"
ug_out=$(sb run Hca1 timeout 120 "$build/test/sandbox/openib-ud-garbage" --lid "$ug_lid" --qpn "$ug_qpn" \
  --qkey "$ug_qkey" --count 2000 --seed 16 2>&1) || fail "openib-ud-garbage to Hca3 (LID $ug_lid, QPN $ug_qpn, Q_Key $ug_qkey): $ug_out"
read -r _ ug_sent _ ug_mal _ ug_et _ ug_other _ ug_src <<<"$(tail -1 <<<"$ug_out")"
((ug_sent == 2000 && ug_mal + ug_et + ug_other == ug_sent)) || fail "openib-ud-garbage: $ug_out"
ug_grown() {
  read -r ug_mp1 ug_et1 ug_rx1 ug_all1 <<<"$(ug_counts)"
  ((10 * (ug_mp1 - ug_mp0) >= 9 * ug_mal && 10 * (ug_et1 - ug_et0) >= 9 * ug_et))
}
ug_grown || until_ok 50 ug_grown || fail "Hca3 counted $((ug_mp1 - ug_mp0)) malformed of $ug_mal and $((ug_et1 - ug_et0)) unknown EtherTypes of $ug_et sent ($((ug_rx1 - ug_rx0)) IPoIB packets received of $ug_sent)"
kill -0 "$(cat "$OPENIB_SANDBOX/Hca3/ibd.pid")" || fail "Hca3's ibd died on garbage UD packets"
for b in Hca1 Hca2 Hca4; do until_ok 25 ping4 Hca3 "${ip4[$b]}" || fail "ping Hca3 -> $b after the garbage UD packets"; done
for b in Hca1 Hca2 Hca4; do until_ok 25 ping6 Hca3 "${ll[$b]}" || fail "ping -6 Hca3 -> $b after the garbage UD packets"; done
kill -0 "$(cat "$OPENIB_SANDBOX/Hca1/ibd.pid")" || fail "Hca1's ibd died sending garbage"
[[ $(ipoib_json Hca1 | python3 -c 'import json,sys; print(json.load(sys.stdin)["state"])') == up ]] || fail "Hca1's IPoIB is not up after sending garbage: $(ipoib_json Hca1)"
until_ok 25 ping4 Hca1 "${ip4[Hca2]}" || fail "ping Hca1 -> Hca2 after sending garbage"
# tshark rightly finds the garbage malformed: the last section leaves out
# what Hca1 sent Hca3 from any QP but its IPoIB QP (the garbage sender's;
# ug_src is its QPN). Hca1's IPoIB packets are still checked.
ug_ipoib1=$(ipoib_json Hca1 | python3 -c 'import json,sys; print(json.load(sys.stdin)["qpn"])')
ug_not_garbage="!(infiniband.lrh.slid == $(lid_of Hca1) && infiniband.lrh.dlid == $ug_lid && infiniband.deth.srcqp != $ug_ipoib1)"
# iperf3's payload is random bytes, which tshark's heuristic application
# dissectors now and then take for a protocol (THRIFT, ...) and call
# malformed: port 5201 is checked up to TCP/UDP, not above.
ug_not_garbage+=" && !(tcp.port == 5201 || udp.port == 5201)"
ok "$ug_sent garbage UD packets Hca1 -> Hca3 (QPN $ug_qpn): $((ug_rx1 - ug_rx0)) received; drop_malformed_packet +$((ug_mp1 - ug_mp0)) (of $ug_mal malformed), drop_ethertype +$((ug_et1 - ug_et0)) (of $ug_et), all drops +$((ug_all1 - ug_all0)) ($ug_other random under a known EtherType); Hca3 pings every host (IPv4, IPv6), Hca1 carries on"
# --- issue 29, finding 11: user nobody on Hca1 forges ARP replies ----------
# UD SENDs to Hca3's IPoIB QP (LID, QPN, Q_Key all public), each an IB ARP
# reply saying that Hca2's address is at Hca1's IPoIB QP, 20 of them 0.1 s
# apart (past the kernel's neighbour locktime: the old bridge passed them
# on and Hca3's kernel took Hca1's MAC for Hca2). With Q_Key 0x0b1b they
# reach Hca3's bridge, which drops them (the sender hardware address is
# not the packet's source QP: drop_spoofed); with bit 31 set (0x80000b1b)
# the device sends the QP's own Q_Key (nobody may set no controlled one),
# and Hca3's port drops them (Q_KeyViolations). Either way `ip neigh` on
# Hca3 keeps Hca2's MAC and Hca3 pings Hca2.
reachable_copy "$nb/bin" "$build/test/sandbox/openib-ud-garbage"
neigh_mac() { sb run "$1" ip neigh show dev ib0 to "$2" | awk '{for (i = 1; i < NF; i++) if ($i == "lladdr") print $(i + 1)}'; }
spoofed_of() { ipoib_json "$1" | python3 -c 'import json,sys; print(json.load(sys.stdin)["counters"]["drop_spoofed"])'; }
qkey_violations() { sb run "$1" smpquery portinfo "$(lid_of "$1")" 1 | awk -F'[.]+' '/^QkeyViolations/ {print $2}'; }
# forge QKEY [ARGS...]: as nobody on Hca1, through a link to its ibd's socket.
forge() {
  ln -f "$OPENIB_SANDBOX/Hca1/ibd.sock" "$nb/ibd.sock"
  local json1 q1 g1
  json1=$(ipoib_json Hca1)
  q1=$(python3 -c 'import json,sys; print(int(json.load(sys.stdin)["qpn"], 16))' <<<"$json1")
  g1=$(python3 -c 'import json,sys; print(json.load(sys.stdin)["gid"])' <<<"$json1")
  read -r fq_qpn _ <<<"$(ipoib_json Hca3 | python3 -c 'import json,sys; j=json.load(sys.stdin); print(int(j["qpn"], 16), j["qkey"])')"
  sb run Hca1 "${AS_NOBODY[@]}" env LD_LIBRARY_PATH="$nb/bin/lib" "$nb/bin/openib-ud-garbage" --socket "$nb/ibd.sock" \
    --lid "$(lid_of Hca3)" --qpn "$fq_qpn" --qkey "$1" --forge-arp "${ip4[Hca2]}" --claim-qpn "$q1" --claim-gid "$g1" \
    --target-ip "${ip4[Hca3]}" --count 20 --interval-ms 100 "${@:2}" 2>&1
}
# not_poisoned MAC WHAT: Hca3's entry for Hca2 still MAC, and Hca3 pings Hca2.
not_poisoned() {
  local now
  now=$(neigh_mac Hca3 "${ip4[Hca2]}")
  [[ $now == "$1" ]] || fail "$2: Hca3's neighbour ${ip4[Hca2]} is now $now, was $1 (Hca1's MAC: $(sb run Hca1 cat /sys/class/net/ib0/address))"
  until_ok 25 ping4 Hca3 "${ip4[Hca2]}" || fail "$2: Hca3 no longer pings Hca2"
}
until_ok 25 ping4 Hca3 "${ip4[Hca2]}" || fail "ping Hca3 -> Hca2 before the forged ARP"
mac2=$(neigh_mac Hca3 "${ip4[Hca2]}")
[[ -n $mac2 ]] || fail "Hca3 has no neighbour entry for Hca2: $(sb run Hca3 ip neigh show dev ib0)"
sp0=$(spoofed_of Hca3) qv0=$(qkey_violations Hca3)
out=$(forge 0x0b1b) || fail "forging as nobody with Q_Key 0x0b1b: $out"
[[ $(tail -1 <<<"$out") == "forged 20 "* ]] || fail "forging with Q_Key 0x0b1b: $out"
spoofed_grown() { (($(spoofed_of Hca3) - sp0 >= 18)); }
until_ok 25 spoofed_grown || fail "Hca3 counted $(($(spoofed_of Hca3) - sp0)) of 20 forged ARP replies as drop_spoofed"
not_poisoned "$mac2" "20 forged ARP replies with Q_Key 0x0b1b"
sp1=$(spoofed_of Hca3)
out=$(forge 0x80000b1b) || fail "forging as nobody with Q_Key 0x80000b1b: $out"
qv_grown() { (($(qkey_violations Hca3) - qv0 >= $1)); }
until_ok 25 qv_grown 18 || fail "Hca3's port counted $(($(qkey_violations Hca3) - qv0)) Q_Key violations of 20 forged with 0x80000b1b"
(($(spoofed_of Hca3) == sp1)) || fail "a forged ARP with Q_Key 0x80000b1b reached Hca3's bridge"
not_poisoned "$mac2" "20 forged ARP replies with Q_Key 0x80000b1b"
qv1=$(qkey_violations Hca3)
ok "user nobody on Hca1, 20 forged ARP replies 'Hca2 is at Hca1's IPoIB QP' to Hca3: Q_Key 0x0b1b: drop_spoofed +$((sp1 - sp0)); 0x80000b1b: Q_KeyViolations +$((qv1 - qv0)); Hca3 still has $mac2 for ${ip4[Hca2]} and pings Hca2"

# --- a cable pulled: carrier off, traffic stops; back: it comes back -------
read -r sw swport <<<"$(awk '/^(Hca|Ca)[ \t]/ && /"Hca2"/ {f=1; next} f && /^\[1\]/ {match($0, /"[^"]*"\[[0-9]+\]/); m=substr($0, RSTART, RLENGTH); gsub(/"/, "", m); sub(/\[/, " ", m); sub(/\]/, "", m); print m; exit}' "$topo")"
sb fabric link down "$sw" "$swport" >/dev/null
until_ok 100 no_carrier Hca2 || fail "Hca2's ib0 kept its carrier with its cable pulled"
if ping4 Hca1 "${ip4[Hca2]}" >/dev/null 2>&1; then fail "ping reached Hca2 with its cable pulled"; fi
sb fabric link up "$sw" "$swport" >/dev/null
until_ok 150 has_carrier Hca2 || fail "Hca2's ib0 has no carrier after the cable came back"
until_ok 50 ping4 Hca1 "${ip4[Hca2]}" || fail "no ping to Hca2 after its cable came back"
ok "Hca2's cable ($sw port $swport) pulled: carrier off, ping fails; plugged back: carrier on, ping works"

# --- a controlled Q_Key (issue 29, finding 11a) -----------------------------
# OpenSM again, on Hca4 (whose ibd it needs), with a partitions.conf; the
# other ibds restarted take the broadcast group's Q_Key for their IPoIB QPs.
# start_sm PARTITIONS: that OpenSM (the one before it stopped).
start_sm() {
  [[ -n $osm_pid ]] && { kill "$osm_pid" 2>/dev/null || true; wait "$osm_pid" 2>/dev/null || true; }
  printf '%s\n' "$1" >"$OPENIB_SANDBOX/partitions.conf"
  : >"$OPENIB_SANDBOX/opensm-qkey.log"
  bash "$sandbox" run Hca4 opensm -g "$(sb run Hca4 ibstat -p | head -1)" -P "$OPENIB_SANDBOX/partitions.conf" \
    -f "$OPENIB_SANDBOX/opensm-qkey.log" -d2 -s 5 >/dev/null 2>&1 &  # execs: $! is OpenSM
  osm_pid=$!
  until_ok 600 subnet_up || fail "OpenSM with '$1': no SUBNET UP: $(tail -5 "$OPENIB_SANDBOX/opensm-qkey.log")"
}
subnet_up() { grep -q "SUBNET UP" "$OPENIB_SANDBOX/opensm-qkey.log"; }
qkey_of() { ipoib_json "$1" | python3 -c 'import json,sys; print(json.load(sys.stdin).get("qkey", ""))'; }
has_qkey() { [[ $(qkey_of "$1") == "$2" ]]; }
# restart_all QKEY: Hca1..Hca3's ibds restarted, ib0 addressed and up with
# the broadcast Q_Key QKEY; Hca3 pings Hca2; mac2 its neighbour entry, sp0
# and qv0 its drop_spoofed and Q_KeyViolations.
restart_all() {
  local h
  for h in Hca1 Hca2 Hca3; do
    sb restart "$h" >/dev/null 2>&1 || fail "restarting $h's ibd"
    until_ok 150 has_ib0 "$h" || fail "$h: no ib0 after its restart: $(grep -i 'ipoib\|sa:\|error' "$OPENIB_SANDBOX/$h/ibd.log" | tail -8)"
    sb run "$h" ip addr add "${ip4[$h]}/24" dev ib0
    sb run "$h" ip link set ib0 up
    until_ok 150 has_carrier "$h" || fail "$h: ib0 has no carrier after its restart: $(grep ipoib "$OPENIB_SANDBOX/$h/ibd.log" | tail -3)"
    until_ok 50 has_qkey "$h" "$1" || fail "$h: IPoIB's Q_Key is $(qkey_of "$h"), not $1"
  done
  until_ok 50 ping4 Hca3 "${ip4[Hca2]}" || fail "ping Hca3 -> Hca2 with Q_Key $1"
  mac2=$(neigh_mac Hca3 "${ip4[Hca2]}")
  sp0=$(spoofed_of Hca3) qv0=$(qkey_violations Hca3)
}
# refused N WHAT: N forged replies all Q_KeyViolations at Hca3's port (9/10
# at least: UD), none at its bridge, its table and ping unchanged.
refused() {
  until_ok 25 qv_grown $(($1 * 9 / 10)) || fail "Hca3's port counted $(($(qkey_violations Hca3) - qv0)) Q_Key violations of $1 forged ($2)"
  (($(spoofed_of Hca3) == sp0)) || fail "forged ARP replies reached Hca3's bridge ($2)"
  not_poisoned "$mac2" "$1 forged ARP replies ($2)"
}
# The SM's group: Q_Key 0x8000000b. nobody's QP cannot send it: with
# 0x8000000b in the WQE its own Q_Key goes (C10-15), with 0x0000000b the
# low bits; Hca3's port drops both, its bridge sees neither.
sb sm Hca1 stop
start_sm 'Default=0x7fff, ipoib, Q_Key=0x8000000b : ALL=full ;'
restart_all 0x8000000b
out=$(forge 0x8000000b) || fail "forging as nobody with Q_Key 0x8000000b: $out"
out=$(forge 0x0000000b) || fail "forging as nobody with Q_Key 0x0000000b: $out"
out=$(forge 0x8000000b --qp-qkey 0x0000000b) || fail "forging as nobody with Q_Key 0x8000000b, its QP's 0x0000000b: $out"
refused 60 "the SM's controlled Q_Key"
out=$(forge 0x8000000b --qp-qkey 0x8000000b) && fail "nobody's QP took the controlled Q_Key 0x8000000b: $out"
grep -q "Operation not permitted\|EPERM\|controlled" <<<"$out" || fail "nobody's MODIFY_QP to 0x8000000b: $out"
ok "broadcast group with Q_Key 0x8000000b (OpenSM partitions.conf): 60 ARP replies forged by nobody (0x8000000b, 0x0000000b, 0x8000000b over a QP of 0x0000000b) are Q_KeyViolations +$(($(qkey_violations Hca3) - qv0)) at Hca3's port, none reached its bridge; its table and ping to Hca2 unchanged; nobody's MODIFY_QP to 0x8000000b refused"

# ibd's group: an OpenSM whose default partition is not marked ipoib makes
# no broadcast group; the first ibd to come up creates it with
# --ipoib-qkey 0x80001234 (added to every ibd's arguments; Hca4's first,
# with no SM yet, then the SM on Hca4, then the others).
for h in "${hosts[@]}"; do printf '%s\0' --ipoib-qkey 0x80001234 >>"$OPENIB_SANDBOX/$h/ibd.args"; done
kill "$osm_pid" 2>/dev/null || true
wait "$osm_pid" 2>/dev/null || true
osm_pid=''
sb restart Hca4 >/dev/null 2>&1 || fail "restarting Hca4's ibd"
start_sm 'Default=0x7fff : ALL=full ;'
restart_all 0x80001234
out=$(forge 0x80001234) || fail "forging as nobody with Q_Key 0x80001234: $out"
out=$(forge 0x00001234) || fail "forging as nobody with Q_Key 0x00001234: $out"
refused 40 "ibd's controlled Q_Key"
ok "broadcast group created by ibd with --ipoib-qkey 0x80001234: 40 ARP replies forged by nobody are Q_KeyViolations +$(($(qkey_violations Hca3) - qv0)) at Hca3's port, none reached its bridge; its table and ping to Hca2 unchanged"

# --- tshark: the cables' captures decode with no malformed frame -----------
sb down >/dev/null 2>&1 || true  # closes the captures
n=0 arp=0
for f in "$OPENIB_SANDBOX_PCAP_DIR"/*.pcap; do
  # Wireshark's InfiniBand dissector decodes an IPoIB payload itself: its
  # 4-byte header, then the EtherType's protocol (infiniband:ethertype:...).
  # One pass for both counts, one for the malformed (full dissection).
  read -r c_ipoib c_arp <<<"$(tshark -n -r "$f" -T fields -e frame.protocols -e arp.hw.type 2>/dev/null |
    awk -F'\t' '$1 ~ /infiniband:ethertype/ {i++} $2 == "32" {a++} END {print i + 0, a + 0}')"
  n=$((n + c_ipoib))
  arp=$((arp + c_arp))
  bad=$(tshark -n -r "$f" -Y "(_ws.malformed || _ws.expert.severity == error) && $ug_not_garbage" -T fields -e frame.number 2>/dev/null | wc -l)
  ((bad == 0)) || fail "$f: $bad malformed frames (garbage sender QPN $ug_src, Hca1's IPoIB QPN $ug_ipoib1): $(tshark -n -r "$f" -Y "(_ws.malformed || _ws.expert.severity == error) && $ug_not_garbage" 2>/dev/null | head -3)
frame slid dlid srcqp protocols: $(tshark -n -r "$f" -Y "(_ws.malformed || _ws.expert.severity == error) && $ug_not_garbage" -T fields -e frame.number -e infiniband.lrh.slid -e infiniband.lrh.dlid -e infiniband.deth.srcqp -e frame.protocols 2>/dev/null | head -3)"
done
((n > 0)) || fail "tshark decoded no IPoIB packet in the captures"
((arp > 0)) || fail "tshark decoded no ARP with hardware type 32"
ok "tshark: $n IPoIB packets in the cables' captures, $arp ARP with hardware type 32, none malformed"
