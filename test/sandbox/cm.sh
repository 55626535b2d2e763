#!/usr/bin/env bash
# Issue 17: the IB connection manager (docs/cm.md) on the sandbox
# (net.2sw2path4hca, Debian's OpenSM), with openib-cm-pingpong between the
# hosts' ibds:
#  - an RC connection across both switches carrying data both ways; SIDR
#    for UD; no listener -> REJ 8; a consumer reject's 148 bytes of private
#    data received whole;
#  - the peer client SIGKILLed -> disconnect request; a stale REQ (a host's
#    ibd restarted behind a pulled cable, its QPN reused) -> REJ 10 and the
#    old connection disconnected; the peer's ibd down -> timeout after the
#    retries;
#  - 10,000 connections open at once between two ibds (ibd's CM memory
#    per connection printed);
#  - tshark decodes every captured CM MAD, none malformed;
#  - 5 % loss and 5 % duplication on every cable -> 1,000 connections, each
#    established exactly once and torn down.
#   cm.sh BUILD_DIR
set -euo pipefail
build=$(cd "$1" && pwd)
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
topo=/usr/share/doc/ibsim-utils/net-examples/net.2sw2path4hca
# shellcheck source=lib.sh
source "$here/lib.sh"
sandbox_test sbc 198.18.28 cm-test
# 10,000 connections: more QPs and CM ids per client and uid than the
# default quotas (docs/operations.md "Limits", docs/cm.md "Security"), and
# room for their events while a loaded machine keeps the client from
# reading them (1 MiB by default: a run with the CPUs busy overran it, and
# ibd closed the client's CM socket as it should).
export OPENIB_SANDBOX_IBD_ARGS="--client-max-qps 12000 --uid-max-qps 12000 --client-max-cm-ids 12000 --uid-max-cm-ids 12000 --client-max-event-bytes 16777216 --uid-max-event-bytes 16777216"
pcap_dir=$OPENIB_SANDBOX.pcap
export OPENIB_SANDBOX_PCAP_DIR=$pcap_dir
mkdir -p "$pcap_dir"
pp=$build/examples/openib-cm-pingpong
bg_pids=()
cleanup_cm() {
  for p in "${bg_pids[@]}"; do kill "$p" 2>/dev/null || true; done
  sandbox_cleanup
  rm -rf "$pcap_dir" /tmp/cm-test-wait.$$ /tmp/cm-test-hold.$$
}
trap cleanup_cm EXIT
log_of() { echo "$OPENIB_SANDBOX/$1.log"; }
# bg NAME HOST ARGS...: openib-cm-pingpong in the background, output in log_of NAME; sets bg.
bg() {
  local name=$1 host=$2
  shift 2
  bash "$sandbox" run "$host" "$pp" "$@" >"$(log_of "$name")" 2>&1 &  # execs: $! is the example
  bg=$!
  bg_pids+=("$bg")
}
# waitfor NAME TEXT [TRIES]: until the log shows TEXT (0.1 s apart).
waitfor() {
  for _ in $(seq "${3:-300}"); do grep -q -- "$2" "$(log_of "$1")" 2>/dev/null && return 0; sleep 0.1; done
  fail "$1 never printed '$2': $(cat "$(log_of "$1")")"
}
# ibd's CM counters on HOST (for failure messages).
cm_counters() { ibdctl_counters "$1" | grep '^cm\.' | grep -v ' 0$' | tr '\n' ' '; }
port_active() { [[ $(field "$1" "State") == Active && $(lid_of "$1") != 0 ]]; }
wait_active() {
  for _ in $(seq 300); do port_active "$1" && return 0; sleep 0.1; done
  fail "$1's port never became Active with a LID"
}
client() {  # client HOST ARGS...: openib-cm-pingpong in the foreground; its output; its status in rc
  local host=$1
  shift
  rc=0
  out=$(sb run "$host" timeout 120 "$pp" "$@" 2>&1) || rc=$?
}

sb up "$topo" --sm Hca1 || fail "sandbox up"
declare -A gid
for h in Hca1 Hca2 Hca3 Hca4; do
  wait_active "$h"
  gid[$h]=$(gid_of "$h")
done
ok "GIDs: Hca1 ${gid[Hca1]}, Hca2 ${gid[Hca2]}, Hca3 ${gid[Hca3]}, Hca4 ${gid[Hca4]}"

# --- an RC connection across both switches (Hca1 on Switch1, Hca2 on
# Switch2), 200 x 4 KiB each way with every byte checked ----------------------
bg rc-server Hca2 -n 200
waitfor rc-server "listening"
client Hca1 --dgid "${gid[Hca2]}" -n 200 --private hello-from-hca1
((rc == 0)) || fail "RC client ($rc): $out"
wait "$bg" || fail "RC server: $(cat "$(log_of rc-server)")"
grep -q "reply: .*private 'hello-from-hca1'" <<<"$out" || fail "the REP did not echo the REQ's private data: $out"
grep -q "200 iters" <<<"$out" || fail "RC client: $out"
grep -q "200 iters" "$(log_of rc-server)" || fail "RC server: $(cat "$(log_of rc-server)")"
grep -q "private 'hello-from-hca1'" "$(log_of rc-server)" || fail "REQ private data: $(cat "$(log_of rc-server)")"
grep -q "timewait exit" <<<"$out" || fail "no timewait exit: $out"
ok "RC across both switches: 200 x 4 KiB both ways, private data both ways, disconnected, timewait exit"

# --- SIDR for UD ---------------------------------------------------------------
bg sidr-server Hca4 --ud -n 50
waitfor sidr-server "listening"
client Hca1 --dgid "${gid[Hca4]}" --ud -n 50 --private sidr-please
((rc == 0)) || fail "SIDR client ($rc): $out"
wait "$bg" || fail "SIDR server: $(cat "$(log_of sidr-server)")"
grep -q "SIDR reply: status 0, QPN 0x[0-9a-f]*, Q_Key 0x00c0ffee, private 'sidr-ok'" <<<"$out" || fail "SIDR: $out"
grep -q "private 'sidr-please'" "$(log_of sidr-server)" || fail "SIDR_REQ private data: $(cat "$(log_of sidr-server)")"
grep -q "50 iters" <<<"$out" || fail "UD ping-pong: $out"
ok "SIDR: the UD QP and Q_Key found, 50 UD messages each way"

# --- no listener -> REJ 8 (invalid service ID) ------------------------------------
client Hca1 --dgid "${gid[Hca3]}" -S 0x2222
((rc == 2)) && grep -q "rejected: reason 8," <<<"$out" || fail "no listener ($rc): $out"
ok "no listener: REJ reason 8"

# --- a consumer reject with the REJ's 148 bytes of private data --------------------
pd=$(printf 'r%.0s' $(seq 147))Z
bg reject-server Hca3 --reject "$pd" --serve 1
waitfor reject-server "listening"
client Hca1 --dgid "${gid[Hca3]}"
wait "$bg" || fail "reject server: $(cat "$(log_of reject-server)")"
((rc == 2)) && grep -q "rejected: reason 28, private '$pd'" <<<"$out" || fail "consumer reject ($rc): $out"
ok "consumer reject: reason 28 and all 148 bytes of private data"

# --- the peer client SIGKILLed -> the other side is disconnected -------------------
bg kill-server Hca2 --serve 1
srv=$bg
waitfor kill-server "listening"
bg kill-client Hca1 --dgid "${gid[Hca2]}" --idle
cli=$bg
waitfor kill-server "established"
waitfor kill-client "established"
kill -KILL "$srv"
wait "$srv" 2>/dev/null || true
wait "$cli" || fail "client of the killed server: $(cat "$(log_of kill-client)")"
grep -q "disconnect request" "$(log_of kill-client)" || fail "no disconnect request: $(cat "$(log_of kill-client)")"
grep -q "timewait exit" "$(log_of kill-client)" || fail "no timewait exit: $(cat "$(log_of kill-client)")"
for _ in $(seq 50); do [[ $(counter Hca2 cm.ids) == 0 ]] && break; sleep 0.1; done
[[ $(counter Hca2 cm.ids) == 0 ]] || fail "Hca2's ibd still holds $(counter Hca2 cm.ids) CM ids of the killed client"
ok "peer client SIGKILLed: disconnect request, timewait exit; its ibd holds no id of it"

# --- 10,000 connections open at once between two ibds --------------------------------
hold=/tmp/cm-test-hold.$$
rm -f "$hold"
mem0=$(counter Hca4 cm.memory_bytes)
bg many-server Hca2 --serve 10000 -q
waitfor many-server "listening"
OPENIB_CM_HOLD_FILE=$hold bash "$sandbox" run Hca4 timeout 600 "$pp" --dgid "${gid[Hca2]}" --conns 10000 --hold -q \
  >"$(log_of many-client)" 2>&1 &
many=$!
bg_pids+=("$many")
for _ in $(seq 3000); do [[ -e $hold ]] && break; kill -0 "$many" 2>/dev/null || break; sleep 0.1; done
[[ -e $hold ]] || fail "10,000 connections were not all established: $(tail -5 "$(log_of many-client)")"
mem_c=$(counter Hca4 cm.memory_bytes)
mem_s=$(counter Hca2 cm.memory_bytes)
ids_s=$(counter Hca2 cm.ids)
((ids_s >= 10001)) || fail "the server's ibd has $ids_s CM ids while 10,000 connections are open"
per_c=$(((mem_c - mem0) / 10000))
per_s=$((mem_s / 10000))
rm -f "$hold"
wait "$many" || fail "10,000 connections: $(tail -5 "$(log_of many-client)")"
wait "$bg" || fail "10,000 connections, server: $(tail -5 "$(log_of many-server)")
Hca2: $(cm_counters Hca2)
Hca4: $(cm_counters Hca4)"
grep -q "connections: 10000 established, 10000 disconnected, 0 rejected, 0 failed" "$(log_of many-client)" ||
  fail "10,000 connections: $(cat "$(log_of many-client)")"
# Each side's transitions of a step went to the device together (one
# doorbell: the passive side's INIT, RTR, RTS; the active side's RTR, RTS), most
# of the time (not when the command slots were busy).
ch_c=$(counter Hca4 cm.qp_chains) ch_s=$(counter Hca2 cm.qp_chains)
((ch_c >= 5000 && ch_s >= 5000)) || fail "chained transitions: active $ch_c, passive $ch_s for 10,000 connections"
ok "10,000 connections open at once; ibd's CM memory per connection: active $per_c B, passive $per_s B"

# --- a stale REQ: Hca3's cable pulled, its ibd restarted (no DREQ gets out), the
# same QPN connects again -> REJ 10, and the old connection is disconnected ----------
bg stale-server Hca1 --serve 1
srv=$bg
waitfor stale-server "listening"
bg stale-client Hca3 --dgid "${gid[Hca1]}" --idle
old=$bg
waitfor stale-server "established"
qpn_old=$(sed -n 's/.*from QPN \(0x[0-9a-f]*\).*/\1/p' "$(log_of stale-server)" | head -1)
sb fabric link down Switch1 2 >/dev/null
sb restart Hca3 || fail "restart Hca3"
wait "$old" 2>/dev/null || true  # its ibd went away
wait_active Hca3
client Hca3 --dgid "${gid[Hca1]}"
((rc == 2)) && grep -q "rejected: reason 10," <<<"$out" || fail "stale REQ ($rc) from QPN $qpn_old again: $out"
wait "$srv" || fail "stale server: $(cat "$(log_of stale-server)")"
grep -q "disconnect request (stale)" "$(log_of stale-server)" || fail "old connection: $(cat "$(log_of stale-server)")"
ok "stale REQ (QPN $qpn_old reused after an ibd restart): REJ 10, the old connection disconnected"

# --- the peer's ibd down -> timeout after the retries ----------------------------------
wf=/tmp/cm-test-wait.$$
touch "$wf"
r0=$(counter Hca1 cm.port1.retries)
t0=$(counter Hca1 cm.port1.timeouts)
bg down-client Hca1 --dgid "${gid[Hca2]}" --cm-timeout 12 --cm-retries 3 --wait-file "$wf"
waitfor down-client "path resolved"
dc=$bg
OPENIB_SANDBOX_WHILE_DOWN="rm -f $wf; for i in \$(seq 600); do kill -0 $dc 2>/dev/null || exit 0; sleep 0.1; done; exit 1" \
  sb restart Hca2 || fail "restart Hca2 (the client did not finish while it was down: $(cat "$(log_of down-client)"))"
rc=0
wait "$dc" || rc=$?
((rc == 3)) && grep -q "timeout: status 110" "$(log_of down-client)" || fail "peer ibd down ($rc): $(cat "$(log_of down-client)")"
r1=$(counter Hca1 cm.port1.retries)
t1=$(counter Hca1 cm.port1.timeouts)
((r1 - r0 == 3 && t1 - t0 == 1)) || fail "peer down: $((r1 - r0)) retries and $((t1 - t0)) timeouts counted (3 and 1 expected)"
ok "peer ibd down: the REQ sent 1 + 3 times, then a timeout event"

# --- tshark: every captured CM MAD decodes, none malformed -------------------------------
# (tshark exits 2 on a capture ibfabric is still writing: its frames count all the same.)
frames() { tshark -n -r "$@" 2>/dev/null || true; }
ncm=0
for f in "$pcap_dir"/*.pcap; do
  n=$(frames "$f" -Y 'infiniband.mad.mgmtclass == 0x07' | wc -l)
  ncm=$((ncm + n))
  bad=$(frames "$f" -Y '(_ws.malformed || _ws.expert.severity == error) && infiniband.mad.mgmtclass == 0x07' | wc -l)
  ((bad == 0)) || fail "$f: $bad malformed CM MADs"
done
((ncm > 20000)) || fail "tshark found only $ncm CM MADs in the captures"
ok "tshark: $ncm CM MADs decoded, none malformed"

# --- 5 % loss and 5 % duplication on every cable: 1,000 connections, each exactly once ---
sb down >/dev/null 2>&1 || true
export OPENIB_SANDBOX_FAULTS=drop=0.05,dup=0.05,seed=17
unset OPENIB_SANDBOX_PCAP_DIR
sb up "$topo" --sm Hca1 || fail "sandbox up with faults"
for h in Hca1 Hca2; do wait_active "$h"; done
gid[Hca2]=$(gid_of Hca2)
bg lossy-server Hca2 --serve 1000 -q --cm-timeout 15
waitfor lossy-server "listening"
client Hca1 --dgid "${gid[Hca2]}" --conns 1000 -q --cm-timeout 15
((rc == 0)) || fail "1,000 connections over lossy cables ($rc): $out"
grep -q "connections: 1000 established, 1000 disconnected, 0 rejected, 0 failed" <<<"$out" || fail "lossy: $out"
wait "$bg" || fail "lossy server: $(tail -5 "$(log_of lossy-server)")
Hca1: $(cm_counters Hca1)
Hca2: $(cm_counters Hca2)"
grep -q "server: 1000 established, 1000 done" "$(log_of lossy-server)" || fail "lossy server: $(tail -5 "$(log_of lossy-server)")"
dup=$(( $(counter Hca1 cm.port1.duplicates) + $(counter Hca2 cm.port1.duplicates) ))
ret=$(( $(counter Hca1 cm.port1.retries) + $(counter Hca2 cm.port1.retries) ))
((dup > 0 && ret > 0)) || fail "the faults did not reach the CM: $dup duplicates, $ret retries"
ok "5 % loss + 5 % duplication: 1,000 connections each established once ($ret retries, $dup duplicates answered)"

echo "PASS: the IB CM between the sandbox's ibds"
