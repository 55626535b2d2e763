#!/usr/bin/env bash
# Issue 18: the RDMA CM's examples (docs/cma.md "Examples") between the
# hosts' ibds by the IP addresses of their IPoIB interfaces, in
# net.2sw2path4hca with OpenSM (root, namespaces):
#  - openib-rping across both switches, data verified on both sides (IPv4,
#    and IPv6 by link-local address);
#    openib-udaddy (UD through SIDR) and openib-mckey (two receivers)
#    likewise, every byte checked;
#  - an address nobody has -> RDMA_CM_EVENT_ADDR_ERROR within the bound; a
#    port nobody listens on -> RDMA_CM_EVENT_REJECTED; a second bind of a
#    port -> EADDRINUSE;
#  - the rping server killed mid-transfer -> the client says the server
#    disconnected; an rping client killed mid-transfer -> the server says
#    so and serves the next client;
#  - openib-cmtime: 1,000 connections at once to one listener, every one
#    established and torn down, no id left in either ibd.
#   cma_examples.sh BUILD_DIR
set -euo pipefail
build=$(cd "$1" && pwd)
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
topo=/usr/share/doc/ibsim-utils/net-examples/net.2sw2path4hca
# shellcheck source=lib.sh
source "$here/lib.sh"
sandbox_test sbe 198.18.31.0/25 cma-examples-test
export OPENIB_SANDBOX_IBD_ARGS="--ipoib ib0"
ex=$build/examples
bg_pids=()
cleanup_cma() {
  for p in "${bg_pids[@]}"; do kill "$p" 2>/dev/null || true; done
  sandbox_cleanup
  rm -f /tmp/cma-examples-wait.$$
}
trap cleanup_cma EXIT
log_of() { echo "$OPENIB_SANDBOX/$1.log"; }
# bg NAME HOST CMD...: in the background, output in log_of NAME; sets bg.
bg() {
  local name=$1 host=$2
  shift 2
  bash "$sandbox" run "$host" "$@" >"$(log_of "$name")" 2>&1 &  # execs: $! is the command
  bg=$!
  bg_pids+=("$bg")
}
# waitfor NAME TEXT [TRIES]: until the log shows TEXT (0.1 s apart).
waitfor() {
  for _ in $(seq "${3:-300}"); do grep -q -- "$2" "$(log_of "$1")" 2>/dev/null && return 0; sleep 0.1; done
  fail "$1 never printed '$2': $(cat "$(log_of "$1")")"
}
# fg HOST CMD...: in the foreground (at most 120 s); output in out, status in rc.
fg() {
  local host=$1
  shift
  rc=0
  out=$(sb run "$host" timeout 120 "$@" 2>&1) || rc=$?
}
until_ok() {
  local n=$1
  shift
  for _ in $(seq "$n"); do "$@" >/dev/null 2>&1 && return 0; sleep 0.2; done
  return 1
}
has_ib0() { sb run "$1" ip link show ib0; }
has_carrier() { [[ $(sb run "$1" cat /sys/class/net/ib0/carrier 2>/dev/null) == 1 ]]; }
ping4() { sb run "$1" ping -c 1 -W 1 "$2"; }

hosts=(Hca1 Hca2 Hca3 Hca4)
declare -A ip
for i in 1 2 3 4; do ip[Hca$i]=198.18.31.$((130 + i)); done
nobody=198.18.31.250

sb up "$topo" --sm Hca1 || fail "sandbox up"
for h in "${hosts[@]}"; do
  until_ok 150 has_ib0 "$h" || fail "$h: no ib0"
  sb run "$h" ip addr add "${ip[$h]}/25" dev ib0
  sb run "$h" ip link set ib0 up
  until_ok 150 has_carrier "$h" || fail "$h: ib0 has no carrier"
done
for h in Hca2 Hca3 Hca4; do until_ok 25 ping4 Hca1 "${ip[$h]}" || fail "no ping Hca1 -> $h"; done
ok "ib0 up with an address on every host"

# --- rping across both switches (Hca1 on Switch1, Hca2 on Switch2) ----------
bg rping-server Hca2 "$ex/openib-rping" -s -a "${ip[Hca2]}" -C 50 -V
srv=$bg
waitfor rping-server "listening"
fg Hca1 "$ex/openib-rping" -c -a "${ip[Hca2]}" -C 50 -S 1000 -v -V
((rc == 0)) || fail "rping client ($rc): $out"
wait "$srv" || fail "rping server: $(cat "$(log_of rping-server)")"
grep -q "^rping: 50 iterations, verified" <<<"$out" || fail "rping client: $out"
grep -q "^ping data: rdma-ping-49: " <<<"$out" || fail "rping -v: $out"
grep -q "^rping: 50 iterations, verified" "$(log_of rping-server)" || fail "rping server: $(cat "$(log_of rping-server)")"
ok "rping Hca1 -> Hca2 by IP address: 50 x 1000 bytes READ and WRITTEN back, verified on both sides"

# --- rping over IPv6: Hca4's link-local address, a [::] listener (both
# hosts' link-local addresses past DAD: the source must be usable too)
link_local() { sb run "$1" ip -6 -o addr show dev ib0 scope link | awk '!/tentative/ {sub(/\/.*/, "", $4); print $4}'; }
has_link_local() { [[ -n $(link_local "$1") ]]; }
for h in Hca3 Hca4; do
  until_ok 50 has_link_local "$h" || fail "$h: no IPv6 link-local address past DAD: $(sb run "$h" ip -6 addr show dev ib0)"
done
ll=$(link_local Hca4)
bg rping6-server Hca4 "$ex/openib-rping" -s -a :: -C 20 -V
srv=$bg
waitfor rping6-server "listening"
fg Hca3 "$ex/openib-rping" -c -a "$ll%ib0" -C 20 -S 2000 -V
((rc == 0)) || fail "rping over IPv6 ($rc): $out"
wait "$srv" || fail "rping server over IPv6: $(cat "$(log_of rping6-server)")"
grep -q "^rping: 20 iterations, verified" <<<"$out" || fail "rping over IPv6: $out"
grep -q "connection request from \[fe80::" "$(log_of rping6-server)" || fail "$(cat "$(log_of rping6-server)")"
ok "rping Hca3 -> Hca4 by IPv6 link-local address ($ll): 20 x 2000 bytes, verified"

# --- udaddy (UD through SIDR), Hca1 -> Hca4 --------------------------------
bg udaddy-server Hca4 "$ex/openib-udaddy" -b "${ip[Hca4]}" -C 30
srv=$bg
waitfor udaddy-server "listening"
fg Hca1 "$ex/openib-udaddy" -s "${ip[Hca4]}" -C 30 -S 1024
((rc == 0)) || fail "udaddy client ($rc): $out"
wait "$srv" || fail "udaddy server: $(cat "$(log_of udaddy-server)")"
grep -q "established: remote QPN 0x[0-9a-f]*, Q_Key 0x01234567" <<<"$out" || fail "udaddy: $out"
grep -q "30 messages of 1024 bytes sent and answered, verified" <<<"$out" || fail "udaddy client: $out"
grep -q "30 messages from LID .* received and answered, verified" "$(log_of udaddy-server)" ||
  fail "udaddy server: $(cat "$(log_of udaddy-server)")"
ok "udaddy Hca1 -> Hca4: Q_Key 0x01234567, 30 UD messages each way, verified"

# --- mckey: Hca1 sends to 239.1.2.3, Hca2 and Hca3 receive -----------------
wait_file=/tmp/cma-examples-wait.$$
touch "$wait_file"
bg mckey-r2 Hca2 "$ex/openib-mckey" -m 239.1.2.3 -b "${ip[Hca2]}" -C 40 --timeout 60
r2=$bg
bg mckey-r3 Hca3 "$ex/openib-mckey" -m 239.1.2.3 -b "${ip[Hca3]}" -C 40 --timeout 60
r3=$bg
bg mckey-s Hca1 "$ex/openib-mckey" -m 239.1.2.3 -b "${ip[Hca1]}" -s -C 40 --start-delay 100 --wait-file "$wait_file"
snd=$bg
waitfor mckey-r2 "joined"
waitfor mckey-r3 "joined"
waitfor mckey-s "joined"
rm -f "$wait_file"
wait "$snd" || fail "mckey sender: $(cat "$(log_of mckey-s)")"
wait "$r2" || fail "mckey receiver on Hca2: $(cat "$(log_of mckey-r2)")"
wait "$r3" || fail "mckey receiver on Hca3: $(cat "$(log_of mckey-r3)")"
grep -q "joined 239.1.2.3: MLID 0x[0-9a-f]*, QPN 0xffffff, Q_Key 0x01234567" "$(log_of mckey-s)" ||
  fail "mckey join: $(cat "$(log_of mckey-s)")"
for r in mckey-r2 mckey-r3; do
  grep -q "received 40 of 40$" "$(log_of $r)" || fail "$r: $(cat "$(log_of $r)")"
done
ok "mckey: 40 messages to 239.1.2.3 from Hca1, all received and checked on Hca2 and Hca3"

# --- errors: an address nobody has, a port nobody listens on, a port bound twice
t0=$(date +%s)
fg Hca1 "$ex/openib-rping" -c -a "$nobody" --timeout 30
t1=$(date +%s)
((rc == 1)) && grep -q "RDMA_CM_EVENT_ADDR_ERROR" <<<"$out" || fail "an address nobody has ($rc): $out"
ok "an address nobody has: $(tail -1 <<<"$out") after $((t1 - t0)) s"
fg Hca1 "$ex/openib-rping" -c -a "${ip[Hca3]}" -p 7999
((rc == 1)) && grep -q "RDMA_CM_EVENT_REJECTED" <<<"$out" || fail "a port nobody listens on ($rc): $out"
ok "a port nobody listens on: $(tail -1 <<<"$out")"
bg busy-server Hca3 "$ex/openib-rping" -s -p 7300 --timeout 60
busy=$bg
waitfor busy-server "listening"
fg Hca3 "$ex/openib-rping" -s -p 7300
((rc == 1)) && grep -q "Address already in use" <<<"$out" || fail "a second bind of a port ($rc): $out"
kill "$busy" 2>/dev/null || true
wait "$busy" 2>/dev/null || true
ok "a second bind of port 7300: $(tail -1 <<<"$out")"

# --- the server killed mid-transfer: the client says so ----------------------
bg kill-server Hca2 "$ex/openib-rping" -s -p 7301
srv=$bg
waitfor kill-server "listening"
bg kill-client Hca1 "$ex/openib-rping" -c -a "${ip[Hca2]}" -p 7301 -C 1000000 -S 4096 --timeout 30
cli=$bg
waitfor kill-server "connection request"
sleep 1
kill -9 "$srv"
wait "$srv" 2>/dev/null || true
rc=0
wait "$cli" || rc=$?
((rc == 1)) && grep -q "server disconnected" "$(log_of kill-client)" ||
  fail "the server killed ($rc): $(cat "$(log_of kill-client)")"
ok "the server killed mid-transfer: $(tail -1 "$(log_of kill-client)")"

# --- an rping client killed mid-transfer: the server serves the next ----------
# The server's -C: a client that did not do exactly 20 iterations vanished,
# wherever the kill lands (between two iterations too).
bg next-server Hca2 "$ex/openib-rping" -s -p 7302 -V -C 20 --timeout 30
srv=$bg
waitfor next-server "listening"
bg gone-client Hca1 "$ex/openib-rping" -c -a "${ip[Hca2]}" -p 7302 -C 1000000 -S 4096 --timeout 30
cli=$bg
waitfor next-server "connection request"
sleep 1
kill -9 "$cli"
wait "$cli" 2>/dev/null || true
waitfor next-server "client disconnected after"
fg Hca3 "$ex/openib-rping" -c -a "${ip[Hca2]}" -p 7302 -C 20 -V
((rc == 0)) || fail "the next client ($rc): $out"
wait "$srv" || fail "rping server after a vanished client: $(cat "$(log_of next-server)")"
grep -q "^rping: 20 iterations, verified" "$(log_of next-server)" || fail "$(cat "$(log_of next-server)")"
ok "a client killed mid-transfer: '$(grep "client disconnected" "$(log_of next-server)")', then the next served"

# --- 1,000 connections at once to one listener ---------------------------------
bg cmtime-server Hca4 "$ex/openib-cmtime" -b "${ip[Hca4]}" -c 1000 --timeout 60
srv=$bg
waitfor cmtime-server "listening"
fg Hca1 "$ex/openib-cmtime" -s "${ip[Hca4]}" -c 1000 --timeout 60 --json
((rc == 0)) || fail "cmtime client ($rc): $out"
wait "$srv" || fail "cmtime server: $(cat "$(log_of cmtime-server)")"
grep -q '"connections": 1000' <<<"$out" || fail "cmtime: $out"
grep -q "server: 1000 connections, 1000 established, 0 failed" "$(log_of cmtime-server)" ||
  fail "cmtime server: $(cat "$(log_of cmtime-server)")"
ok "cmtime: 1000 connections at once, all established and torn down: $out"
# Nothing left behind in either ibd once both programs are gone.
cma_ids() { "$build/src/tools/ibdctl" --socket "$OPENIB_SANDBOX/$1/ibd.sock" cma --json | grep -o '"cma\.ids":[0-9]*'; }
for h in Hca1 Hca4; do
  for _ in $(seq 50); do [[ $(cma_ids "$h") == '"cma.ids":0' ]] && break; sleep 0.1; done
  [[ $(cma_ids "$h") == '"cma.ids":0' ]] || fail "$h: RDMA CM ids left after cmtime: $(cma_ids "$h")"
done
ok "no RDMA CM id left in either ibd"
