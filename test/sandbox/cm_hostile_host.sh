#!/usr/bin/env bash
# Issue 29, findings 8 and 9, end to end (docs/cm.md "Security"): a hostile
# host on the fabric attacks a live connection between two other hosts and
# does no harm. In net.2sw2path4hca with Debian's OpenSM,
# openib-cm-pingpong connects Hca1 -> Hca2 (RC, across both switches) and
# ping-pongs; meanwhile root on Hca3 runs openib-cm-forge against Hca2's
# and Hca1's QP1:
#  - REQs naming the other end's CA GUID and QPNs 1..4096 plus the real QPN
#    (read from the pingpong's output), each with a fresh comm ID: what
#    IBA 12.9.8.3.1 calls a stale connection when it names a live one; the
#    old code tore the connection down (DREQ, kStale) for anyone;
#  - REJs and DREQs of comm ID 0 naming the victim's own comm ID (read from
#    the fabric's capture, as an eavesdropper would) and 1,024 guesses; the
#    old code skipped the peer-ID check for comm ID 0.
# Then: both ibds still have the connection established, the ping-pong
# finishes every exchange (data flowing after the attack) and disconnects
# normally; the forged REQs are counted stale_foreign and nothing stale,
# the forged REJs and DREQs dropped_unknown_id. A control: one such REQ
# sent from the real peer's own port (root on Hca1) against a second
# connection, held open (--conns 1 --hold), is stale and disconnects it.
# On the old code (a stale REQ from anyone; comm ID 0 skipping the pair
# check) the connection is gone after the first forged REQs or REJs.
#   cm_hostile_host.sh BUILD_DIR
set -euo pipefail
build=$(cd "$1" && pwd)
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
topo=/usr/share/doc/ibsim-utils/net-examples/net.2sw2path4hca
# shellcheck source=lib.sh
source "$here/lib.sh"
sandbox_test sbf 198.18.35 cm-hostile-host
pcap_dir=$OPENIB_SANDBOX.pcap
hold=$OPENIB_SANDBOX.hold
export OPENIB_SANDBOX_PCAP_DIR=$pcap_dir
mkdir -p "$pcap_dir"
pp=$build/examples/openib-cm-pingpong
forge=$build/test/sandbox/openib-cm-forge
# The ping-pong outlasts the attack (a few seconds) by far: 64-byte messages.
iters=${CM_HOSTILE_ITERS:-100000}
cleanup_hostile() {
  kill_bg
  sandbox_cleanup
  rm -rf "$pcap_dir" "$hold"
}
trap cleanup_hostile EXIT
ibdctl() { "$build/src/tools/ibdctl" --socket "$OPENIB_SANDBOX/$1/ibd.sock" "${@:2}"; }
port_active() { [[ $(field "$1" "State") == Active && $(lid_of "$1") != 0 ]]; }
wait_active() {
  for _ in $(seq 300); do port_active "$1" && return 0; sleep 0.1; done
  fail "$1's port never became Active with a LID"
}
# The node GUID, the CM's CA GUID (docs/cm.md "In ibd").
node_guid() { sb run "$1" ibstat simhca0 | awk -F': ' '$1 ~ /Node GUID/ {print $2}'; }
# ids in STATE on port 1 of HOST's CM engine (ibdctl cm --json; IBA 12.9 state names).
in_state() { ibdctl "$1" cm --json | jq -r --arg s "$2" '.ports[] | select(.port == 1) | .engine.ids_by_state[$s] // 0'; }
cm_counters() { ibdctl_counters "$1" | grep '^cm\.port1\.' | grep -v ' 0$' | tr '\n' ' '; }
# Both ends still established, the ping-pong still running.
still_up() {
  local what=$1
  [[ $(in_state Hca1 established) == 1 && $(in_state Hca2 established) == 1 ]] ||
    fail "after $what: the connection is not established on both ibds (Hca1 $(in_state Hca1 established), Hca2 $(in_state Hca2 established))
Hca1: $(cm_counters Hca1)
Hca2: $(cm_counters Hca2)
client: $(tail -5 "$(log_of client)")
server: $(tail -5 "$(log_of server)")"
  if ! kill -0 "$cli" 2>/dev/null || ! kill -0 "$srv" 2>/dev/null; then
    fail "after $what: the ping-pong is over (finished early? raise CM_HOSTILE_ITERS): client: $(tail -5 "$(log_of client)") server: $(tail -5 "$(log_of server)")"
  fi
}

sb up "$topo" --sm Hca1 || fail "sandbox up"
declare -A gid lid guid
for h in Hca1 Hca2 Hca3; do
  wait_active "$h"
  gid[$h]=$(gid_of "$h")
  lid[$h]=$(lid_of "$h")
  guid[$h]=$(node_guid "$h")
done
ok "LIDs: Hca1 ${lid[Hca1]}, Hca2 ${lid[Hca2]}, Hca3 ${lid[Hca3]} (the attacker); CA GUIDs: Hca1 ${guid[Hca1]}, Hca2 ${guid[Hca2]}"

# --- the victims: an RC connection Hca1 -> Hca2 ping-ponging -------------------
bg server Hca2 "$pp" -n "$iters" -s 64
srv=$bg
waitfor server "listening"
bg client Hca1 "$pp" --dgid "${gid[Hca2]}" -n "$iters" -s 64 --private victim
cli=$bg
waitfor server "established"
waitfor client "established"
qpn_cli=$(sed -n 's/^request: .* from QPN \(0x[0-9a-f]*\) .*/\1/p' "$(log_of server)" | head -1)
qpn_srv=$(sed -n 's/^reply: QPN \(0x[0-9a-f]*\),.*/\1/p' "$(log_of client)" | head -1)
[[ -n $qpn_cli && -n $qpn_srv ]] || fail "QPNs not found: $(cat "$(log_of server)" "$(log_of client)")"
# The comm IDs, from the REP on the wire (Local: Hca2's id, Remote: Hca1's).
comm_srv='' comm_cli=''
for _ in $(seq 50); do
  for f in "$pcap_dir"/*.pcap; do
    read -r comm_srv comm_cli < <(tshark -n -r "$f" -Y "infiniband.cm.rep.localqpn == $qpn_srv" \
      -T fields -e infiniband.cm.rep -e infiniband.cm.rep.remotecommid 2>/dev/null | head -1) || true
    [[ -n $comm_srv && -n $comm_cli ]] && break 2
  done
  sleep 0.1
done
[[ -n $comm_srv && -n $comm_cli ]] || fail "the connection's REP is not in the capture"
still_up "connecting"
ok "connection Hca1 QPN $qpn_cli (comm ID $comm_cli) -> Hca2 QPN $qpn_srv (comm ID $comm_srv): established on both ibds, ping-ponging"

c0() { counter "$1" "cm.port1.$2"; }
declare -A sf0 st0 du0 sfd dud
for h in Hca1 Hca2; do sf0[$h]=$(c0 $h stale_foreign); st0[$h]=$(c0 $h stale); du0[$h]=$(c0 $h dropped_unknown_id); done

# --- finding 8: forged stale REQs from Hca3 ------------------------------------
# Hca2 hears "Hca1's QPN q wants a new connection" for q in 1..4096 and the
# real one; Hca1 the same of Hca2's. The path in the REQ even claims the
# real peer's LID; the MAD's source LID is Hca3's.
# forge_reqs VICTIM PEER PEER_QPN SEED: the REQs to VICTIM claiming PEER's CA GUID
# (and, in the REQ's path, its LID); then the connection must still be up
# on both ibds, VICTIM must have counted the REQs of the real QPN (it is in
# 1..4096 too: 1 to 4 of them) stale_foreign and found nothing stale.
forge_reqs() {
  local v=$1 p=$2 q=$3 sf st
  out=$(sb run Hca3 "$forge" --lid "${lid[$v]}" --ca-guid "${guid[$p]}" --qpn "$q" \
    --claim-lid "${lid[$p]}" --no-rej --no-dreq --seed "$4" 2>&1) || fail "forge against $v: $out"
  grep -q "^forged REQ 4099 " <<<"$out" || fail "forge against $v: $out"
  while read -r l; do echo "  Hca3 -> $v: $l"; done <<<"$out"
  # REJ 10 for the real QPN, REJ 8 for the rest: wait for the count to settle.
  for _ in $(seq 50); do (($(c0 "$v" stale_foreign) > sf0[$v])) && break; sleep 0.1; done
  sleep 0.5
  still_up "the forged REQs to $v"
  sf=$(($(c0 "$v" stale_foreign) - sf0[$v]))
  st=$(($(c0 "$v" stale) - st0[$v]))
  ((st == 0)) || fail "$v: $st forged REQs taken for stale connections: $(cm_counters "$v")"
  ((sf >= 1 && sf <= 4)) || fail "$v: $sf forged stale REQs counted stale_foreign (1 to 4 expected): $(cm_counters "$v")"
  sfd[$v]=$sf
}
attack_start=$(date +%s.%N)
forge_reqs Hca2 Hca1 "$qpn_cli" 29
forge_reqs Hca1 Hca2 "$qpn_srv" 30
ok "forged stale REQs (4,099 to each end: QPNs 1..4096, the real one 3 more times): stale_foreign Hca2 +${sfd[Hca2]}, Hca1 +${sfd[Hca1]}, stale +0; still established on both ibds"

# --- finding 9: REJs and DREQs of comm ID 0 ---------------------------------------
# forge_ids VICTIM PEER COMM_ID QPN SEED: REJs and DREQs to VICTIM of Local
# Comm ID 0 and Remote Comm ID its own COMM_ID (3 times) or a guess (1,024),
# the DREQs naming its QPN; then the connection must still be up on both
# ibds and VICTIM must have dropped them all as naming no connection
# (2 x 1,027, unless UD lost some: at least 2,000).
forge_ids() {
  local v=$1 p=$2 du
  out=$(sb run Hca3 "$forge" --lid "${lid[$v]}" --ca-guid "${guid[$p]}" --no-req \
    --comm-id "$3" --dreq-qpn "$4" --seed "$5" 2>&1) || fail "forge REJ/DREQ against $v: $out"
  grep -q "^forged REQ 0 REJ 1027 DREQ 1027 " <<<"$out" || fail "forge REJ/DREQ against $v: $out"
  while read -r l; do echo "  Hca3 -> $v: $l"; done <<<"$out"
  for _ in $(seq 50); do (($(c0 "$v" dropped_unknown_id) - du0[$v] >= 2054)) && break; sleep 0.1; done
  still_up "the forged REJs and DREQs to $v"
  du=$(($(c0 "$v" dropped_unknown_id) - du0[$v]))
  ((du >= 2000)) || fail "$v: only $du of 2,054 forged REJs/DREQs counted dropped_unknown_id: $(cm_counters "$v")"
  dud[$v]=$du
}
forge_ids Hca2 Hca1 "$comm_srv" "$qpn_srv" 31
forge_ids Hca1 Hca2 "$comm_cli" "$qpn_cli" 32
attack_secs=$(echo "$(date +%s.%N) - $attack_start" | bc)
ok "forged REJs and DREQs of comm ID 0 (the victim's real comm ID 3 times, 1,024 guesses; 2,054 to each end): dropped_unknown_id Hca2 +${dud[Hca2]}, Hca1 +${dud[Hca1]}; still established on both ibds"

# --- the ping-pong goes on to its end and disconnects normally ---------------------
wait "$cli" || fail "client: $(cat "$(log_of client)")"
wait "$srv" || fail "server: $(cat "$(log_of server)")"
for n in client server; do
  grep -q "^$iters iters" "$(log_of $n)" || fail "$n: $(cat "$(log_of $n)")"
  grep -q "disconnect request (stale)" "$(log_of $n)" && fail "$n was told its connection is stale: $(cat "$(log_of $n)")"
done
grep -q "timewait exit" "$(log_of client)" || fail "client: no timewait exit: $(cat "$(log_of client)")"
grep -q "private 'victim'" "$(log_of client)" || fail "client: REP private data: $(cat "$(log_of client)")"
pp_secs=$(sed -n "s/^$iters iters in \([0-9.]*\) seconds.*/\1/p" "$(log_of client)")
ok "ping-pong: all $iters x 64 B exchanges both ways in $pp_secs s (the attack took $(printf %.1f "$attack_secs") s of them), every byte checked; disconnected by the client, timewait exit"

# --- control: the same REQ from the real peer's host is stale (IBA 12.9.8.3.1) ----
# A held connection Hca1 -> Hca2; root on Hca1 (its peer's port, LID
# ${lid[Hca1]}) sends one REQ naming Hca1's CA GUID and the held
# connection's QPN: Hca2 finds it stale and disconnects it.
rm -f "$hold"
bg control-server Hca2 "$pp" --serve 1 -S 0x0000000100000002
srv=$bg
waitfor control-server "listening"
export OPENIB_CM_HOLD_FILE=$hold
bg control-client Hca1 "$pp" --dgid "${gid[Hca2]}" --conns 1 --hold -S 0x0000000100000002
unset OPENIB_CM_HOLD_FILE
cli=$bg
for _ in $(seq 300); do [[ -e $hold ]] && break; sleep 0.1; done
[[ -e $hold ]] || fail "control connection not established: $(cat "$(log_of control-client)")"
qpn_ctl=$(sed -n 's/^request: .* from QPN \(0x[0-9a-f]*\) .*/\1/p' "$(log_of control-server)" | head -1)
[[ -n $qpn_ctl ]] || fail "control: no QPN: $(cat "$(log_of control-server)")"
st0[Hca2]=$(c0 Hca2 stale)
out=$(sb run Hca1 "$forge" --lid "${lid[Hca2]}" --ca-guid "${guid[Hca1]}" --qpn-first "$((qpn_ctl))" \
  --qpn-last "$((qpn_ctl))" --repeat 1 --no-rej --no-dreq --seed 33 2>&1) || fail "control forge: $out"
grep -q "^forged REQ 1 " <<<"$out" || fail "control forge: $out"
waitfor control-server "disconnect request (stale)"
(($(c0 Hca2 stale) == st0[Hca2] + 1)) || fail "control: Hca2 counted $(($(c0 Hca2 stale) - st0[Hca2])) stale REQs: $(cm_counters Hca2)"
rm -f "$hold"
wait "$srv" || fail "control server: $(cat "$(log_of control-server)")"
wait "$cli" || true  # its connection went away under it
ok "control: one REQ from the peer's own port (LID ${lid[Hca1]}, QPN $qpn_ctl): stale, the held connection disconnected by Hca2"

echo "PASS: a hostile host's forged stale REQs, REJs and DREQs leave a live connection alone"
