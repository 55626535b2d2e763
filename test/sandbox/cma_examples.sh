#!/usr/bin/env bash
# Issue 18: the RDMA CM's examples (docs/cma.md "Examples") between the
# hosts' ibds, in net.2sw2path4hca with OpenSM and IPoIB (root,
# namespaces), where sandbox_cma (cma.sh) does not go:
#  - openib-rping and openib-udaddy by IPv6 link-local address (Hca3 on
#    Switch1 -> Hca4 on Switch2), data verified on both sides;
#  - an rping client killed mid-transfer -> the server says "client
#    disconnected" and serves the next client; --serve 2 serves two in
#    sequence.
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
cleanup_cma() {
  kill_bg
  sandbox_cleanup
}
trap cleanup_cma EXIT
# fg HOST CMD...: in the foreground (at most 120 s); output in out, status in rc.
fg() {
  local host=$1
  shift
  rc=0
  out=$(sb run "$host" timeout 120 "$@" 2>&1) || rc=$?
}
ping4() { sb run "$1" ping -c 1 -W 1 "$2"; }

hosts=(Hca1 Hca2 Hca3 Hca4)
declare -A ip
for i in 1 2 3 4; do ip[Hca$i]=198.18.31.$((130 + i)); done

sb up "$topo" --sm Hca1 || fail "sandbox up"
for h in "${hosts[@]}"; do ib0_up "$h" "${ip[$h]}/25"; done
until_ok 25 ping4 Hca1 "${ip[Hca2]}" || fail "no ping Hca1 -> Hca2"
ok "ib0 up with an address on every host"

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
bg udaddy6-server Hca4 "$ex/openib-udaddy" -b "$ll%ib0" -C 10
srv=$bg
waitfor udaddy6-server "listening"
fg Hca3 "$ex/openib-udaddy" -s "$ll%ib0" -C 10 -S 700
((rc == 0)) || fail "udaddy over IPv6 ($rc): $out"
wait "$srv" || fail "udaddy server over IPv6: $(cat "$(log_of udaddy6-server)")"
grep -q "10 messages of 700 bytes sent and answered, verified" <<<"$out" || fail "udaddy over IPv6: $out"
ok "udaddy Hca3 -> Hca4 by IPv6 link-local address: 10 UD messages each way, verified"

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

# --- --serve 2: two clients in sequence -------------------------------------------
bg serve2 Hca2 "$ex/openib-rping" -s -p 7303 --serve 2 -V
srv=$bg
waitfor serve2 "listening"
fg Hca1 "$ex/openib-rping" -c -a "${ip[Hca2]}" -p 7303 -C 5 -V
((rc == 0)) || fail "first of two clients ($rc): $out"
fg Hca3 "$ex/openib-rping" -c -a "${ip[Hca2]}" -p 7303 -C 7 -S 5000 -V
((rc == 0)) || fail "second of two clients ($rc): $out"
wait "$srv" || fail "rping --serve 2: $(cat "$(log_of serve2)")"
[[ $(grep -c "^rping: [57] iterations, verified" "$(log_of serve2)") == 2 ]] || fail "--serve 2: $(cat "$(log_of serve2)")"
ok "--serve 2: two clients served in sequence"

