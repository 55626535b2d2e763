#!/usr/bin/env bash
# Issue 29: a hostile-tenant soak (docs/operations.md "Security model").
# On the sandbox (net.2sw2path4hca, Debian's OpenSM, IPoIB on every host),
# user nobody on Hca2 runs TENANTS openib-hostile-tenant processes of
# CONNS connections each for a bounded time: CM listeners (mask 0, the
# RDMA CM's service ID of root's server, then as many as ibd gives), RDMA
# CM ids, multicast joins, services (the host's ATS record, then fresh
# ones), never-read event sockets and a stream of fresh path queries. Meanwhile
# root on Hca1 and Hca2 runs an rping to Hca2 (by IP address, data
# verified), an IPoIB ping and an mckey with receivers on Hca2 and Hca3.
# Checked:
#  - root's rping, ping and mckey all succeed while nobody holds its share;
#  - every spoof (mask 0, the RDMA CM's service ID, the IPoIB broadcast
#    group, the ATS record) is refused, and nobody's takes stop at its
#    per-uid bounds (EDQUOT);
#  - ibd's resident memory on Hca2 grows by less than BOUND_MIB while
#    nobody holds everything it may;
#  - once the tenants exit, ibd holds none of their CM or RDMA CM ids, the
#    SA shows none of their groups or services, and the host's ATS record
#    is still the host's.
#   hostile_soak.sh BUILD_DIR
set -euo pipefail
build=$(cd "$1" && pwd)
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
topo=/usr/share/doc/ibsim-utils/net-examples/net.2sw2path4hca
# shellcheck source=lib.sh
source "$here/lib.sh"
sandbox_test sbh 198.18.34 hostile-soak
TENANTS=${TENANTS:-4}
CONNS=${CONNS:-8}
SECONDS_HELD=${SECONDS_HELD:-20}
BOUND_MIB=${BOUND_MIB:-64}
# A 0666 socket: user nobody connects too (through a link in a directory it can reach).
export OPENIB_SANDBOX_IBD_ARGS="--ipoib ib0 --socket-mode 0666"
# shellcheck source=../../scripts/unprivileged.sh
source "$here/../../scripts/unprivileged.sh"
nb=$(mktemp -d)
chmod 755 "$nb"
ex=$build/examples
cleanup_soak() {
  kill_bg
  sandbox_cleanup
  rm -rf "$nb"
}
trap cleanup_soak EXIT
hosts=(Hca1 Hca2 Hca3 Hca4)
declare -A ip4
for i in 1 2 3 4; do ip4[Hca$i]=198.19.34.$((10 + i)); done
ctl() { "$build/src/tools/ibdctl" --socket "$OPENIB_SANDBOX/$1/ibd.sock" "${@:2}"; }
# The ibd serving HOST's socket, and its resident set in KiB.
ibd_pid() {
  local p
  for p in $(pgrep -x ibd); do
    tr '\0' ' ' <"/proc/$p/cmdline" | grep -q -- "--socket $OPENIB_SANDBOX/$1/ibd.sock " && { echo "$p"; return; }
  done
  return 1
}
rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }
json_num() { python3 -c 'import json,sys; print(json.load(sys.stdin)[sys.argv[1]])' "$1"; }
records() { sb run "$1" saquery --smkey 1 "$2" 2>/dev/null; }

sb up "$topo" --sm Hca1 || fail "sandbox up"
for h in "${hosts[@]}"; do ib0_up "$h" "${ip4[$h]}/24"; done
ok "ib0 up with an address on every host"
pid2=$(ibd_pid Hca2) || fail "no ibd for Hca2"
# The host's ATS record (docs/ipoib.md): Hca2's address, published by its ibd.
ats_re="ServiceName\.*DAPL Address Translation Service"
until_ok 50 bash -c "bash '$sandbox' run Hca4 saquery --smkey 1 -S 2>/dev/null | grep -q 'DAPL Address Translation'" ||
  fail "no ATS record in the SA: $(records Hca4 -S | tail -20)"
ats_before=$(records Hca4 -S | grep -c "$ats_re" || true)
cm_ids_before=$(ctl Hca2 cm --json | json_num ids)
rss0=$(rss_kib "$pid2")
ok "before: Hca2's ibd ${rss0} KiB resident, $cm_ids_before CM ids; the SA has $ats_before ATS records"

# --- nobody takes its share and tries to speak for root's services -----------------
reachable_copy "$nb/bin" "$build/test/sandbox/openib-hostile-tenant"
ln "$OPENIB_SANDBOX/Hca2/ibd.sock" "$nb/ibd.sock"
tpids=()
for t in $(seq "$TENANTS"); do
  bg "tenant-$t" Hca2 "${AS_NOBODY[@]}" "$nb/bin/openib-hostile-tenant" --socket "$nb/ibd.sock" --conns "$CONNS" \
    --seconds "$SECONDS_HELD" --seed "$t" --victim-port 7174
  tpids+=("$bg")
done
for t in $(seq "$TENANTS"); do waitfor "tenant-$t" "holding" 600; done
rss_held=$(rss_kib "$pid2")
held_groups=$(records Hca4 -m | grep -ci 'ff15:a01b' || true)
held_services=$(records Hca4 -S | grep -c 'hostile tenant' || true)
((held_groups > 0 && held_services > 0)) || fail "the SA shows none of the tenants' groups ($held_groups) or services ($held_services)"
ok "$TENANTS tenants x $CONNS connections of nobody hold what ibd gave them (ibd: ${rss_held} KiB resident; the SA: $held_groups member records, $held_services services of theirs)"

# Resident-set samples while the tenants hold and query (bounded: their time).
(for _ in $(seq $((SECONDS_HELD * 2))); do rss_kib "$pid2" 2>/dev/null || true; sleep 0.5; done) >"$OPENIB_SANDBOX/rss" &
sampler=$!

# --- root's services work meanwhile ----------------------------------------------
bg rping-server Hca2 "$ex/openib-rping" -s -a "${ip4[Hca2]}" -p 7174 -V --serve 3
srv=$bg
waitfor rping-server "listening on"
for i in 1 2 3; do
  out=$(sb run Hca1 "$ex/openib-rping" -c -a "${ip4[Hca2]}" -p 7174 -C 50 -S 1024 -V 2>&1) ||
    fail "rping $i to Hca2 while nobody holds its share: $out
server: $(cat "$(log_of rping-server)")"
done
wait "$srv" || fail "rping server: $(cat "$(log_of rping-server)")"
ok "root's rping Hca1 -> ${ip4[Hca2]}:7174: 3 connections x 50 x 1 KiB verified ($(tail -1 <<<"$out"))"
out=$(sb run Hca1 ping -c 10 -i 0.2 -W 2 "${ip4[Hca2]}" 2>&1) || fail "IPoIB ping Hca1 -> Hca2: $out"
ok "IPoIB ping Hca1 -> Hca2: $(grep -o '[0-9]* received' <<<"$out")"
group=239.1.2.5
rpids=()
for h in Hca2 Hca3; do
  bg "mckey-$h" "$h" "$ex/openib-mckey" -m "$group" -b "${ip4[$h]}" -C 50 --timeout 20
  rpids+=("$bg")
done
for h in Hca2 Hca3; do waitfor "mckey-$h" "joined"; done
out=$(sb run Hca1 "$ex/openib-mckey" -s -m "$group" -b "${ip4[Hca1]}" -C 50 --start-delay 500 2>&1) ||
  fail "mckey sender: $out"
i=0
for h in Hca2 Hca3; do
  wait "${rpids[$i]}" || fail "mckey receiver on $h: $(cat "$(log_of "mckey-$h")")"
  i=$((i + 1))
  grep -q 'received 50 of 50' "$(log_of "mckey-$h")" || fail "mckey on $h: $(cat "$(log_of "mckey-$h")")"
done
ok "root's mckey $group: 50 messages from Hca1 received whole on Hca2 (the tenants' host) and Hca3"

# --- the tenants: spoofs refused, takes bounded ------------------------------------
for t in $(seq "$TENANTS"); do
  rc=0
  wait "${tpids[$((t - 1))]}" || rc=$?
  log=$(log_of "tenant-$t")
  ((rc == 0)) || fail "tenant $t exited $rc (2: a spoof succeeded): $(cat "$log")"
done
wait "$sampler" || true
summary=$(tail -1 "$(log_of tenant-1)")
echo "tenant 1: $summary"
for kind in cm_listen_mask0 cm_listen_rdma_cm_port mcast_join_ipoib_broadcast service_set_ats; do
  grep -q "$kind ok 0 refused [1-9]" <<<"$summary" || fail "tenant 1's $kind: not refused: $summary"
done
# Past the per-uid bounds every tenant is refused more (EDQUOT).
all=$(for t in $(seq "$TENANTS"); do tail -1 "$(log_of "tenant-$t")"; done)
ok_of() { grep -o "$1 ok [0-9]*" <<<"$all" | awk '{s += $3} END {print s + 0}'; }
for kind in cm_listen cma_create_id mcast_join service_set; do
  grep -q "$kind ok [0-9]* refused [1-9][0-9]* (Disk quota exceeded" <<<"$all" ||
    fail "nobody's $kind never reached a bound (EDQUOT): $all"
done
# ... and what they got together is exactly the per-uid bound (ibd's defaults,
# docs/operations.md "Limits"): all of it, and not one more.
for kb in cm_listen:4096 cma_create_id:4096 mcast_join:256 service_set:64; do
  got=$(ok_of "${kb%%:*}")
  ((got == ${kb##*:})) || fail "nobody's ${kb%%:*}: $got in all, the per-uid bound is ${kb##*:}: $all"
done
ok "spoofs refused (mask 0, the RDMA CM's port, the broadcast group, the ATS record); nobody got exactly its per-uid bounds: $(ok_of cm_listen) CM listeners, $(ok_of cma_create_id) RDMA CM ids, $(ok_of mcast_join) groups, $(ok_of service_set) services, then EDQUOT"
peak=$(sort -n "$OPENIB_SANDBOX/rss" | tail -1)
peak=${peak:-$rss_held}
((peak < rss_held)) && peak=$rss_held
growth=$(((peak - rss0) / 1024))
((growth < BOUND_MIB)) || fail "Hca2's ibd grew by $growth MiB (${rss0} -> ${peak} KiB) while nobody held its share; bound $BOUND_MIB MiB"
ok "Hca2's ibd grew by $growth MiB at most (${rss0} -> ${peak} KiB; bound $BOUND_MIB MiB)"

# --- and nothing of theirs is left ----------------------------------------------------
left() { [[ $(ctl Hca2 cm --json | json_num ids) -le $cm_ids_before ]]; }
until_ok 100 left || fail "Hca2's ibd still has $(ctl Hca2 cm --json | json_num ids) CM ids (before: $cm_ids_before)"
# The tenants' groups (MGIDs ff15:a01b:...) and services ("hostile tenant")
# are gone from the SA; no ATS record went with them (the hosts add records
# for addresses that come later, e.g. IPv6 link-local ones, so: not fewer).
sa_clean() {
  ! records Hca4 -m | grep -qi 'ff15:a01b' && ! records Hca4 -S | grep -q 'hostile tenant'
}
until_ok 150 sa_clean || fail "the SA still has the tenants' records: $(records Hca4 -m | grep -ci 'ff15:a01b') groups, $(records Hca4 -S | grep -c 'hostile tenant') services"
ats_after=$(records Hca4 -S | grep -c "$ats_re" || true)
((ats_after >= ats_before)) || fail "ATS records: $ats_before before, $ats_after after: $(records Hca4 -S | grep -A12 'DAPL')"
out=$(sb run Hca1 ping -c 3 -i 0.2 -W 2 "${ip4[Hca2]}" 2>&1) || fail "IPoIB ping after the tenants: $out"
ok "after the tenants: no CM id, member record or service of theirs is left; the ATS records are the hosts' ($ats_after); IPoIB still pings"
