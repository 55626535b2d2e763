#!/usr/bin/env bash
# Issue 33: IPoIB connected mode (RFC 4755; docs/ipoib.md "Connected mode")
# on the sandbox (net.2sw2path4hca, Debian's OpenSM). Hca1..Hca3 start with
# --ipoib-mode connected, Hca4 in datagram mode: the kernel's own tools run
# over ib0 in the hosts' namespaces.
#  - connected hosts: MTU 65520, ping all pairs, 60000-byte pings unfragmented,
#    RC connections in `ibdctl ipoib`, iperf3 TCP and UDP;
#  - a connected host and the datagram one interoperate: ping both ways,
#    large pings fragmented after the kernel learnt the path MTU (ICMP
#    "fragmentation needed" from the bridge, counted icmp_too_big);
#  - multicast with MTU 65520: UDP datagrams to a group arrive;
#  - `ibdctl ipoib mode datagram|connected` at run time (MTU follows); as
#    user nobody: refused;
#  - a connected peer's ibd restarted mid-stream: the connection is made
#    again and ping works; a cable pulled mid-iperf3: it ends, the carrier
#    comes back, traffic again.
#   ipoib_cm.sh BUILD_DIR
set -euo pipefail
build=$(cd "$1" && pwd)
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
topo=/usr/share/doc/ibsim-utils/net-examples/net.2sw2path4hca
# shellcheck source=lib.sh
source "$here/lib.sh"
sandbox_test sbk 198.18.37 ipoib-cm-test
export OPENIB_SANDBOX_IBD_ARGS="--ipoib ib0 --ipoib-mode connected --socket-mode 0666"
# shellcheck source=../../scripts/unprivileged.sh
source "$here/../../scripts/unprivileged.sh"
iperf_pid=''
cleanup_cm() {
  [[ -n $iperf_pid ]] && kill "$iperf_pid" 2>/dev/null
  sandbox_cleanup
}
trap cleanup_cm EXIT
hosts=(Hca1 Hca2 Hca3 Hca4)
declare -A ip4
for i in 1 2 3 4; do ip4[Hca$i]=198.19.37.$((10 + i)); done
ibdctl() { "$build/src/tools/ibdctl" --socket "$OPENIB_SANDBOX/$1/ibd.sock" "${@:2}"; }
ipoib_json() { ibdctl "$1" ipoib --json; }
jq_() { python3 -c "import json,sys; j=json.load(sys.stdin); print($2)" <<<"$(ipoib_json "$1")"; }
cnt() { jq_ "$1" "j['counters'].get('$2', 0)"; }
until_ok() {
  local n=$1
  shift
  for _ in $(seq "$n"); do "$@" >/dev/null 2>&1 && return 0; sleep 0.2; done
  return 1
}
carrier() { sb run "$1" cat /sys/class/net/ib0/carrier 2>/dev/null || echo none; }
has_carrier() { [[ $(carrier "$1") == 1 ]]; }
mtu_of() { sb run "$1" cat /sys/class/net/ib0/mtu; }
ping4() { sb run "$1" ping -c 1 -W 2 "${@:3}" "$2"; }
has_ib0() { sb run "$1" ip link show ib0; }
mode_is() { [[ $(jq_ "$1" "j.get('mode')") == "$2" ]]; }
bring_up() {
  until_ok 150 has_ib0 "$1" || fail "$1: no ib0: $(grep ipoib "$OPENIB_SANDBOX/$1/ibd.log" | tail -5)"
  sb run "$1" ip addr add "${ip4[$1]}/24" dev ib0
  sb run "$1" ip link set ib0 up
  until_ok 150 has_carrier "$1" || fail "$1: ib0 has no carrier: $(grep ipoib "$OPENIB_SANDBOX/$1/ibd.log" | tail -5)"
}

sb up "$topo" --sm Hca1 || fail "sandbox up"
for h in "${hosts[@]}"; do bring_up "$h"; done
# Hca4 goes to datagram mode at run time, as root through ibdctl.
out=$(ibdctl Hca4 ipoib mode datagram) || fail "ibdctl ipoib mode datagram: $out"
for h in Hca1 Hca2 Hca3; do
  until_ok 50 mode_is "$h" connected || fail "$h: mode $(jq_ "$h" "j.get('mode')"), not connected"
  [[ $(mtu_of "$h") == 65520 ]] || fail "$h: ib0's MTU is $(mtu_of "$h") in connected mode, not 65520"
done
until_ok 50 mode_is Hca4 datagram || fail "Hca4: mode $(jq_ Hca4 "j.get('mode')") after ibdctl ipoib mode datagram"
[[ $(mtu_of Hca4) == 2044 ]] || fail "Hca4: ib0's MTU is $(mtu_of Hca4) in datagram mode, not 2044"
ok "Hca1..Hca3 in connected mode (MTU 65520), Hca4 set to datagram mode by ibdctl (MTU 2044)"

# --- every pair pings (connected <-> connected, connected <-> datagram) ----
for a in "${hosts[@]}"; do
  for b in "${hosts[@]}"; do
    [[ $a == "$b" ]] && continue
    until_ok 25 ping4 "$a" "${ip4[$b]}" || fail "ping $a -> $b: $(ping4 "$a" "${ip4[$b]}" 2>&1 | tail -2)
$(ipoib_json "$a")"
  done
done
ok "IPv4 ping between all 12 ordered pairs"

# --- 60000 bytes unfragmented between connected hosts ---------------------
ping4 Hca1 "${ip4[Hca3]}" -M do -s 60000 >/dev/null || fail "60000-byte ping with DF Hca1 -> Hca3: $(ping4 Hca1 "${ip4[Hca3]}" -M do -s 60000 2>&1 | tail -2)
$(ipoib_json Hca1)
$(ipoib_json Hca3)
$(grep -h 'connected mode' "$OPENIB_SANDBOX"/Hca[13]/ibd.log | tail -20)"
up=$(jq_ Hca1 "sum(1 for c in j.get('connections', []) if c['direction'] == 'send' and c['state'] == 'up')")
((up >= 2)) || fail "Hca1 has $up RC connections up, expected at least 2 (to Hca2 and Hca3): $(jq_ Hca1 "j.get('connections')")"
rx3=$(cnt Hca3 cm_qp_received)
((rx3 > 0)) || fail "Hca3 received nothing on RC connections"
ok "60028-byte packets with DF pass Hca1 <-> Hca3; Hca1 has $up RC connections up; Hca3 received $rx3 packets on RC"

# --- a hostile host: root on Hca3 against Hca1's IPoIB-CM listener ----------
# (openib-ipoib-cm-hostile through Hca3's ibd): each refused or dropped and
# counted on Hca1, and Hca1 <-> Hca3 carries on.
hostile_counts() { jq_ Hca1 "' '.join(str(j['counters'][k]) for k in ('cm_rej_bad_private', 'cm_rej_not_neighbour', 'cm_rtu_timeouts', 'cm_broken', 'cm_qp_recv_errors', 'cm_rej_spoofed'))"; }
read -r bp0 nn0 rt0 br0 re0 sp0 <<<"$(hostile_counts)"
hostile=$(sb run Hca3 timeout 120 "$build/test/sandbox/openib-ipoib-cm-hostile" --socket "$OPENIB_SANDBOX/Hca3/ibd.sock" \
  --dgid "$(gid_of Hca1)" --victim-qpn "$(jq_ Hca1 "int(j['qpn'], 16)")" --claim-qpn "$(jq_ Hca3 "int(j['qpn'], 16)")" 2>&1) ||
  fail "openib-ipoib-cm-hostile: $hostile"
# Hca3 impersonates Hca2 (a neighbour of Hca1's): a raw REQ (openib-cm-forge,
# through libibumad) whose Primary Local Port GID and private data are
# Hca2's GID and UD QPN, sent from Hca3's LID.
forged=$(sb run Hca3 timeout 60 "$build/test/sandbox/openib-cm-forge" --lid "$(lid_of Hca1)" --ca-guid 0x1234 \
  -S "$(printf '0x%x' $((0x1000000000000000 | $(jq_ Hca1 "int(j['qpn'], 16)"))))" --qpn-first 100 --qpn-last 100 \
  --no-rej --no-dreq --claim-gid "$(gid_of Hca2)" \
  --private-hex "$(printf '%08x%08x' "$(jq_ Hca2 "int(j['qpn'], 16)")" 65524)" 2>&1) || fail "openib-cm-forge: $forged"
spoof_counted() { (($(cnt Hca1 cm_rej_spoofed) - sp0 >= 1)); }
until_ok 25 spoof_counted || fail "Hca1 counted no cm_rej_spoofed for the REQ claiming Hca2's address from Hca3: $forged"
read -r bp1 nn1 rt1 br1 re1 sp1 <<<"$(hostile_counts)"
grep -q "^short: rejected reason 28" <<<"$hostile" || fail "short private data not refused: $hostile"
grep -q "^stranger: rejected reason 28" <<<"$hostile" || fail "a REQ from a stranger's QPN not refused: $hostile"
grep -q "^no-rtu: reply" <<<"$hostile" || fail "the REQ never answered with an RTU got no REP: $hostile"
grep -q "^too-long: established" <<<"$hostile" || fail "the too-long case did not connect: $hostile"
grep -q "^too-long: send of 65537 bytes completed with status [1-9].* (error)" <<<"$hostile" || fail "a 65537-byte send completed well: $hostile"
((bp1 - bp0 == 1 && nn1 - nn0 == 1 && sp1 - sp0 == 1)) ||
  fail "Hca1 counted cm_rej_bad_private +$((bp1 - bp0)), cm_rej_not_neighbour +$((nn1 - nn0)), cm_rej_spoofed +$((sp1 - sp0)) (1 each)"
rtu_counted() { (($(cnt Hca1 cm_rtu_timeouts) - rt0 == 1)); }
until_ok 100 rtu_counted || fail "Hca1 counted cm_rtu_timeouts +$(($(cnt Hca1 cm_rtu_timeouts) - rt0)), not 1: $hostile"
((br1 - br0 >= 1 && re1 - re0 >= 1)) || fail "the 65537-byte message: Hca1 counted cm_broken +$((br1 - br0)), cm_qp_recv_errors +$((re1 - re0))"
kill -0 "$(cat "$OPENIB_SANDBOX/Hca1/ibd.pid")" || fail "Hca1's ibd died"
until_ok 25 ping4 Hca3 "${ip4[Hca1]}" -M do -s 60000 || fail "60000-byte ping Hca3 -> Hca1 after the hostile REQs"
until_ok 25 ping4 Hca1 "${ip4[Hca3]}" -M do -s 60000 || fail "60000-byte ping Hca1 -> Hca3 after the hostile REQs"
ok "hostile REQs from Hca3 to Hca1's listener: short private data, a stranger's QPN and Hca2's address claimed from Hca3's LID refused (REJ 28, counted), no RTU: cm_rtu_timeouts +1 ($(grep '^no-rtu: then' <<<"$hostile")), 64 KiB + 1: '$(grep '^too-long: send' <<<"$hostile")', cm_broken +$((br1 - br0)); Hca1 <-> Hca3 60000-byte pings still pass"

# --- connected host <-> datagram host: the path MTU is learnt ---------------
icmp0=$(cnt Hca1 icmp_too_big)
ping4 Hca1 "${ip4[Hca4]}" -s 6000 >/dev/null 2>&1 || true  # the first one teaches the kernel (dropped)
until_ok 10 ping4 Hca1 "${ip4[Hca4]}" -s 6000 || fail "6000-byte ping Hca1 -> Hca4 (datagram mode) never passed: $(ping4 Hca1 "${ip4[Hca4]}" -s 6000 2>&1 | tail -2)"
icmp1=$(cnt Hca1 icmp_too_big)
((icmp1 > icmp0)) || fail "Hca1 sent no ICMP fragmentation-needed to its kernel for Hca4 ($icmp0 -> $icmp1)"
pmtu=$(sb run Hca1 ip route get "${ip4[Hca4]}" | grep -o 'mtu [0-9]*' || true)
[[ $pmtu == "mtu 2044" ]] || fail "Hca1's route to Hca4 has '$pmtu', not the learnt 'mtu 2044': $(sb run Hca1 ip route get "${ip4[Hca4]}")"
# (Hca2's first reply is as large: dropped while its kernel learns the path MTU.)
until_ok 10 ping4 Hca4 "${ip4[Hca2]}" -s 6000 || fail "6000-byte ping Hca4 (datagram) -> Hca2 (connected)"
ok "connected Hca1 -> datagram Hca4: ICMP too-big +$((icmp1 - icmp0)) to the kernel, route 'mtu 2044' learnt, 6000-byte pings fragmented pass both ways"

# --- iperf3 TCP and UDP between connected hosts ------------------------------
sb run Hca3 iperf3 -s -1 -B "${ip4[Hca3]}" >"$OPENIB_SANDBOX/iperf-s.log" 2>&1 &
iperf_pid=$!
until_ok 50 sb run Hca3 ss -Hltn "sport = :5201" || fail "iperf3 server does not listen"
out=$(sb run Hca1 timeout 60 iperf3 -c "${ip4[Hca3]}" -n 50M -J) || fail "iperf3 TCP: $out"
tcp=$(python3 -c 'import json,sys; print(round(json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"]/1e6))' <<<"$out") ||
  fail "iperf3 TCP: no result: $out"
mss=$(python3 -c 'import json,sys; print(json.load(sys.stdin)["start"]["tcp_mss_default"])' <<<"$out" 2>/dev/null || echo 0)
wait "$iperf_pid" || true
sb run Hca3 iperf3 -s -1 -B "${ip4[Hca3]}" >"$OPENIB_SANDBOX/iperf-s.log" 2>&1 &
iperf_pid=$!
until_ok 50 sb run Hca3 ss -Hltn "sport = :5201" || fail "iperf3 server does not listen again"
out=$(sb run Hca1 timeout 30 iperf3 -c "${ip4[Hca3]}" -u -b 200M -l 30000 -t 2 -J) || fail "iperf3 UDP: $out"
read -r udp lost <<<"$(python3 -c 'import json,sys; s=json.load(sys.stdin)["end"]["sum"]; print(round(s["bits_per_second"]/1e6), s["lost_percent"])' <<<"$out")"
wait "$iperf_pid" || true
iperf_pid=''
((tcp > 0 && mss > 2044)) || fail "iperf3 TCP $tcp Mbit/s with MSS $mss"
ok "iperf3 Hca1 -> Hca3 in connected mode: TCP $tcp Mbit/s (MSS $mss); UDP 30000-byte datagrams $udp Mbit/s offered 200, $lost % lost"

# --- multicast: a 1000-byte datagram to a group of connected hosts ---------
group=239.1.2.4
recv_py='import socket,struct,sys
s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)
s.bind(("",5556))
s.setsockopt(socket.IPPROTO_IP,socket.IP_ADD_MEMBERSHIP,struct.pack("4s4s",socket.inet_aton(sys.argv[1]),socket.inet_aton(sys.argv[2])))
s.settimeout(4)
n=0
try:
  while True:
    s.recv(5000); n+=1
except socket.timeout: pass
print(n)'
send_py='import socket,sys,time
s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)
s.setsockopt(socket.IPPROTO_IP,socket.IP_MULTICAST_IF,socket.inet_aton(sys.argv[2]))
for i in range(50):
  s.sendto(b"x"*int(sys.argv[3]),(sys.argv[1],5556)); time.sleep(0.01)'
sb run Hca2 python3 -c "$recv_py" "$group" "${ip4[Hca2]}" >"$OPENIB_SANDBOX/m2.out" &
m2=$!
sleep 1
big0=$(cnt Hca1 drop_too_big)
sb run Hca1 python3 -c "$send_py" "$group" "${ip4[Hca1]}" 1000
# Above the group's MTU (the kernel sends 4028 bytes whole with an MTU of
# 65520): dropped and counted, as Linux's ipoib drops them.
sb run Hca1 python3 -c "$send_py" "$group" "${ip4[Hca1]}" 4000
wait "$m2"
n2=$(cat "$OPENIB_SANDBOX/m2.out")
big=$(($(cnt Hca1 drop_too_big) - big0))
((n2 >= 45 && n2 <= 50)) || fail "multicast receiver Hca2 got $n2 datagrams, expected the 50 of 1000 bytes (45 at least: UD)"
((big == 50)) || fail "Hca1 counted $big of 50 multicast datagrams of 4000 bytes as drop_too_big"
ok "UDP multicast $group in connected mode: Hca2 got $n2 of 50 datagrams of 1000 bytes; the 50 of 4000 bytes (above the group's 2044) dropped and counted on Hca1"

# --- the mode is root's: user nobody is refused ------------------------------
nbsock=$(mktemp -d)
chmod 755 "$nbsock"
ln -f "$OPENIB_SANDBOX/Hca2/ibd.sock" "$nbsock/ibd.sock"
out=$("${AS_NOBODY[@]}" "$build/src/tools/ibdctl" --socket "$nbsock/ibd.sock" ipoib mode datagram 2>&1) && fail "nobody changed the mode: $out"
rm -rf "$nbsock"
grep -q "root or CAP_NET_ADMIN" <<<"$out" || fail "nobody's ibdctl ipoib mode: $out"
mode_is Hca2 connected || fail "Hca2 left connected mode after nobody's request"
ok "user nobody's 'ibdctl ipoib mode datagram': refused ($(tail -1 <<<"$out"))"

# --- mode switched at run time: datagram, then connected again ---------------
ibdctl Hca2 ipoib mode datagram >/dev/null || fail "Hca2 to datagram mode"
until_ok 25 mode_is Hca2 datagram || fail "Hca2 not in datagram mode"
[[ $(mtu_of Hca2) == 2044 ]] || fail "Hca2's MTU $(mtu_of Hca2) in datagram mode"
until_ok 25 ping4 Hca1 "${ip4[Hca2]}" || fail "ping Hca1 -> Hca2 after Hca2 went to datagram mode"
ibdctl Hca2 ipoib mode connected >/dev/null || fail "Hca2 to connected mode"
until_ok 50 mode_is Hca2 connected || fail "Hca2 not in connected mode again"
[[ $(mtu_of Hca2) == 65520 ]] || fail "Hca2's MTU $(mtu_of Hca2) in connected mode again"
sb run Hca2 ip neigh flush dev ib0
sb run Hca1 ip neigh flush dev ib0
until_ok 25 ping4 Hca2 "${ip4[Hca1]}" -M do -s 30000 || fail "30000-byte ping Hca2 -> Hca1 after connected mode came back"
ok "Hca2: datagram mode at run time (MTU 2044, ping), connected again (MTU 65520, 30000-byte ping unfragmented)"

# --- a connected peer restarted: connections made again ---------------------
sb restart Hca3 >/dev/null 2>&1 || fail "restarting Hca3's ibd"
bring_up Hca3
until_ok 50 mode_is Hca3 connected || fail "Hca3 not in connected mode after its restart"
until_ok 100 ping4 Hca1 "${ip4[Hca3]}" -M do -s 30000 || fail "30000-byte ping Hca1 -> Hca3 after Hca3's ibd restarted: $(ipoib_json Hca1)"
ok "Hca3's ibd restarted: Hca1 reaches it again with 30000-byte packets ($(cnt Hca1 cm_broken) broken, $(cnt Hca1 cm_disconnects) disconnected connections on Hca1)"

# --- a cable pulled mid-iperf3 --------------------------------------------------
qpn2_before=$(jq_ Hca2 "j['qpn']")
kept0=$(counter Hca2 ipoib.ud_qp_kept)
sb run Hca2 iperf3 -s -1 -B "${ip4[Hca2]}" >"$OPENIB_SANDBOX/iperf-s.log" 2>&1 &
iperf_pid=$!
until_ok 50 sb run Hca2 ss -Hltn "sport = :5201" || fail "iperf3 server on Hca2 does not listen"
sb run Hca1 timeout 40 iperf3 -c "${ip4[Hca2]}" -t 30 >"$OPENIB_SANDBOX/iperf-c.log" 2>&1 &
client=$!
sleep 2
read -r sw swport <<<"$(awk '/^(Hca|Ca)[ \t]/ && /"Hca2"/ {f=1; next} f && /^\[1\]/ {match($0, /"[^"]*"\[[0-9]+\]/); m=substr($0, RSTART, RLENGTH); gsub(/"/, "", m); sub(/\[/, " ", m); sub(/\]/, "", m); print m; exit}' "$topo")"
sb fabric link down "$sw" "$swport" >/dev/null
until_ok 100 sh -c "[ \"\$(bash '$sandbox' run Hca2 cat /sys/class/net/ib0/carrier)\" = 0 ]" || fail "Hca2 kept its carrier"
sleep 1
sb fabric link up "$sw" "$swport" >/dev/null
until_ok 150 has_carrier Hca2 || fail "Hca2 has no carrier after the cable came back"
wait "$client" || true
kill "$iperf_pid" 2>/dev/null || true
wait "$iperf_pid" 2>/dev/null || true
iperf_pid=''
# Hca2 kept its UD QP across the flap (as Linux does): the same QPN, so the
# same 20-byte address and MAC in its neighbours' caches; the RC connection
# to it is made again.
qpn2=$(jq_ Hca2 "j['qpn']")
[[ $qpn2 == "$qpn2_before" ]] || fail "Hca2's UD QPN changed across the cable pull: $qpn2_before -> $qpn2"
(($(counter Hca2 ipoib.ud_qp_kept) == kept0 + 1)) || fail "Hca2's ipoib.ud_qp_kept: $kept0 -> $(counter Hca2 ipoib.ud_qp_kept)"
until_ok 100 ping4 Hca1 "${ip4[Hca2]}" -s 30000 || fail "no 30000-byte ping to Hca2 after its cable came back: $(ipoib_json Hca1)"
# (Every ibd's UD QP may have the same number: the GID tells Hca2's apart.)
g2=$(gid_of Hca2)
conn_up() { [[ $(jq_ Hca1 "sum(1 for c in j.get('connections', []) if c['direction'] == 'send' and c['state'] == 'up' and int(c['qpn'], 16) == int('$qpn2', 16) and __import__('ipaddress').ip_address(c['gid']) == __import__('ipaddress').ip_address('$g2'))") == 1 ]]; }
until_ok 50 conn_up || fail "Hca1 has no RC connection up to Hca2's QPN $qpn2: $(jq_ Hca1 "j.get('connections')")"
for h in "${hosts[@]}"; do kill -0 "$(cat "$OPENIB_SANDBOX/$h/ibd.pid")" || fail "$h's ibd died"; done
ok "Hca2's cable pulled mid-iperf3 and back: carrier back, 30000-byte pings pass, Hca2's UD QPN $qpn2 kept, Hca1's RC connection to it up again; every ibd alive"
