#!/usr/bin/env bash
# Issue 5's subnet tests on the sandbox (scripts/sandbox.sh): ibsim's example
# net.2sw2path4hca (2 switches joined by two cables, 4 CAs), each CA in its
# own network namespace with ibd + simhca, the switches in ibfabric, and
# Debian's unmodified OpenSM and infiniband-diags through the project's
# libibumad.so.3.
#   subnet.sh BUILD_DIR
set -euo pipefail
build=$(cd "$1" && pwd)
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
topo=/usr/share/doc/ibsim-utils/net-examples/net.2sw2path4hca
# shellcheck source=lib.sh
source "$here/lib.sh"
sandbox_test sbt 198.18.7 subnet-test
# pings_back FROM LID SERVER_PID: waits (at most 10 s) until the ibping
# server at LID answers a ping from FROM (it has registered its agent);
# fails if the server exits first.
pings_back() {
  for _ in $(seq 50); do
    sb run "$1" ibping -c 1 -t 200 "$2" 2>/dev/null | grep -q "1 packets transmitted, 1 received" && return 0
    kill -0 "$3" 2>/dev/null || return 1
  done
  return 1
}

sb up "$topo" --sm Hca1 || fail "sandbox up"

# --- OpenSM brings the subnet up: every port Active with a LID ------------
declare -A lid
for h in Hca1 Hca2 Hca3 Hca4; do
  for _ in $(seq 50); do [[ $(field $h State) == Active ]] && break; sleep 0.2; done
  [[ $(field $h State) == Active ]] || fail "$h port 1 is $(field $h State)"
  lid[$h]=$(lid_of $h)
  ((lid[$h] > 0)) || fail "$h has no LID"
  [[ $(field $h "SM lid") == "${lid[Hca1]}" ]] || fail "$h: SM lid $(field $h 'SM lid'), the SM is ${lid[Hca1]}"
done
ok "SUBNET UP: Hca1..4 Active with LIDs ${lid[*]}"
links=$(sb run Hca2 iblinkinfo 2>&1) || fail "iblinkinfo: $links"
# Every cable of the file is up: 8 switch ports (4 to CAs, 2 x 2 between
# the switches) and the 4 CA ports, each Active/LinkUp.
nlinks=$(grep -c "Active/ *LinkUp" <<<"$links" || true)
((nlinks == 12)) || fail "iblinkinfo: $nlinks ports Active/LinkUp, expected 12
$links"
! grep -q "Armed\|Initialize" <<<"$links" || fail "a port is not Active: $links"
ok "iblinkinfo: the 8 switch ports with a cable and the 4 CA ports are Active/LinkUp"

# --- ibnetdiscover prints the whole topology ------------------------------
disc=$(sb run Hca3 ibnetdiscover) || fail "ibnetdiscover: $disc"
(($(grep -c '^Switch' <<<"$disc") == 2)) || fail "ibnetdiscover switches: $disc"
(($(grep -c '^Ca' <<<"$disc") == 4)) || fail "ibnetdiscover CAs: $disc"
for h in Hca1 Hca2 Hca3 Hca4 Switch1 Switch2; do grep -q "\"$h\"" <<<"$disc" || fail "ibnetdiscover lacks $h"; done
# The two cables between the switches, ports 3-3 and 5-5, as in the file.
sw1=$(awk '/^Switch/ && /"Switch1"/ {f=1; next} f && /^$/ {exit} f' <<<"$disc")
(($(grep -c '"Switch2"' <<<"$sw1") == 2)) || fail "Switch1's cables to Switch2: $sw1"
grep -q '^\[3\].*\[3\]' <<<"$sw1" && grep -q '^\[5\].*\[5\]' <<<"$sw1" || fail "Switch1 ports 3, 5: $sw1"
ok "ibnetdiscover: 2 switches, 4 CAs, cables as in $topo"

# --- smpquery by LID and by directed route --------------------------------
sw1_lid=$(awk '/"Switch1" .*lid/ {for (i=1;i<=NF;i++) if ($i=="lid") {print $(i+1); exit}}' <<<"$disc")
[[ -n $sw1_lid ]] || fail "no LID of Switch1 in: $disc"
out=$(sb run Hca2 smpquery nodeinfo "${lid[Hca4]}") || fail "smpquery nodeinfo: $out"
grep -q "NodeType:.*Channel Adapter" <<<"$out" || fail "nodeinfo of Hca4: $out"
out=$(sb run Hca2 smpquery portinfo "${lid[Hca3]}" 1) || fail "smpquery portinfo: $out"
grep -q "^Lid:\.*${lid[Hca3]}$" <<<"$out" || fail "portinfo of Hca3: $out"
out=$(sb run Hca2 smpquery pkeys "${lid[Hca1]}" 1) || fail "smpquery pkeys: $out"
grep -q "0xffff" <<<"$out" || fail "pkeys of Hca1: $out"
out=$(sb run Hca2 smpquery switchinfo "$sw1_lid") || fail "smpquery switchinfo: $out"
grep -q "LinearFdbTop" <<<"$out" || fail "switchinfo: $out"
# Hca1 -> Switch1 (port 1 out of Hca1), then out of Switch1 port 3 -> Switch2.
out=$(sb run Hca1 smpquery -D nodedesc 0,1,3) || fail "smpquery -D nodedesc 0,1,3: $out"
grep -q "Switch2" <<<"$out" || fail "DR 0,1,3 from Hca1 is not Switch2: $out"
out=$(sb run Hca1 smpquery -D switchinfo 0,1) || fail "smpquery -D switchinfo 0,1: $out"
grep -q "LinearFdbTop" <<<"$out" || fail "DR switchinfo: $out"
out=$(sb run Hca1 smpquery -D portinfo 0,1,3,2 1) || fail "smpquery -D portinfo 0,1,3,2: $out"
grep -q "^Lid:\.*${lid[Hca4]}$" <<<"$out" || fail "DR portinfo of Hca4: $out"
ok "smpquery nodeinfo, portinfo, pkeys, switchinfo by LID and by directed route"

# --- saquery: multi-MAD (RMPP) answers ------------------------------------
out=$(sb run Hca4 saquery -N) || fail "saquery -N: $out"
(($(grep -c "NodeRecord dump" <<<"$out") == 6)) || fail "saquery -N: $(grep -c 'NodeRecord dump' <<<"$out") records, expected 6"
out=$(sb run Hca4 saquery -p) || fail "saquery -p: $out"
(($(grep -c "PathRecord dump" <<<"$out") >= 16)) || fail "saquery -p: $(grep -c 'PathRecord dump' <<<"$out") path records"
out=$(sb run Hca4 saquery -m) || fail "saquery -m: $out"
grep -q "MCMemberRecord" <<<"$out" || fail "saquery -m: $out"
# ibd's MAD layers did the RMPP: OpenSM's answers segmented on Hca1, reassembled on Hca4.
(($(counter Hca1 mad_port1_rmpp_sent) >= 3)) || fail "Hca1's MAD layer sent $(counter Hca1 mad_port1_rmpp_sent) RMPP messages"
(($(counter Hca4 mad_port1_rmpp_received) >= 3)) || fail "Hca4's MAD layer reassembled $(counter Hca4 mad_port1_rmpp_received)"
ok "saquery -N (6 NodeRecords), -p, -m: multi-MAD RMPP responses ($(counter Hca4 mad_port1_rmpp_received) reassembled on Hca4)"

# --- ibtracert between two CAs across both switches -----------------------
out=$(sb run Hca1 ibtracert "${lid[Hca1]}" "${lid[Hca4]}") || fail "ibtracert: $out"
grep -q '"Switch1"' <<<"$out" && grep -q '"Switch2"' <<<"$out" && grep -q '"Hca4"' <<<"$out" ||
  fail "ibtracert Hca1 -> Hca4: $out"
ok "ibtracert Hca1 -> Switch1 -> Switch2 -> Hca4"

# --- ibping with its server on another host -------------------------------
bash "$sandbox" run Hca3 ibping -S >"$OPENIB_SANDBOX/ibping-server.log" 2>&1 &
srv=$!
pings_back Hca2 "${lid[Hca3]}" $srv || { kill $srv; fail "ibping -S on Hca3 does not answer: $(cat "$OPENIB_SANDBOX/ibping-server.log")"; }
out=$(sb run Hca2 ibping -c 5 "${lid[Hca3]}") || { kill $srv; fail "ibping: $out"; }
kill $srv 2>/dev/null || true
grep -q "5 packets transmitted, 5 received" <<<"$out" || fail "ibping: $out"
ok "ibping Hca2 -> ibping -S on Hca3: 5 of 5"

# --- perfquery: counters grow with traffic and reset with -R --------------
xmit() { sb run Hca2 perfquery "${lid[Hca4]}" 1 | awk -F'[.:]+' '/^PortXmitPkts/ {print $NF}'; }
sb run Hca2 perfquery -R "${lid[Hca4]}" 1 >/dev/null || fail "perfquery -R"
before=$(xmit)
((before < 10)) || fail "PortXmitPkts $before right after reset"
bash "$sandbox" run Hca4 ibping -S >"$OPENIB_SANDBOX/ibping4.log" 2>&1 &
srv=$!
pings_back Hca2 "${lid[Hca4]}" $srv || { kill $srv; fail "ibping -S on Hca4 does not answer: $(cat "$OPENIB_SANDBOX/ibping4.log")"; }
sb run Hca2 ibping -c 20 "${lid[Hca4]}" >/dev/null || { kill $srv; fail "ibping to Hca4"; }
kill $srv 2>/dev/null || true
after=$(xmit)
((after >= before + 20)) || fail "PortXmitPkts of Hca4 $before -> $after after 20 pings"
ok "perfquery: Hca4 PortXmitPkts $before -> $after with traffic; -R resets"

# --- RC traffic between two hosts across two switches ---------------------
rc_pingpong Hca1 Hca4 "$OPENIB_SANDBOX_NET.10" 200
ok "RC pingpong Hca4 -> Hca1 across Switch2 and Switch1: 200 x 4 KiB"

# --- ibd's SA client and path cache (docs/sa.md "In ibd") -----------------
out=$(path Hca2 "$(gid_of Hca3)") || fail "ibdctl path Hca2 -> Hca3: $out"
[[ $(val dlid <<<"$out") == "${lid[Hca3]}" && $(val slid <<<"$out") == "${lid[Hca2]}" ]] ||
  fail "path Hca2 -> Hca3 is not LID ${lid[Hca2]} -> ${lid[Hca3]}: $out"
[[ $(val source <<<"$out") == sa && $(val pkey <<<"$out") == 0xffff && $(val mtu <<<"$out") -ge 256 ]] ||
  fail "path Hca2 -> Hca3, first lookup: $out"
q0=$(counter Hca2 sa_queries)
out=$(path Hca2 "$(gid_of Hca3)") || fail "ibdctl path, second lookup: $out"
[[ $(val source <<<"$out") == cache && $(val dlid <<<"$out") == "${lid[Hca3]}" ]] || fail "second lookup not from the cache: $out"
[[ $(counter Hca2 sa_queries) == "$q0" ]] || fail "the cached lookup asked the SA ($q0 -> $(counter Hca2 sa_queries))"
((q0 >= 1 && $(counter Hca2 sa_class_port_info) >= 1)) || fail "Hca2's SA client: $q0 queries, $(counter Hca2 sa_class_port_info) ClassPortInfo"
ok "ibd's path cache: Hca2 -> Hca3 is LID ${lid[Hca2]} -> ${lid[Hca3]} from OpenSM's SA, then from the cache"
# Every host to every other: what ibd's SA client got is what saquery
# prints for the same SGID-DGID pair (lib.sh same_path).
declare -A gids
for h in Hca1 Hca2 Hca3 Hca4; do gids[$h]=$(gid_of $h); done
pairs=0
for a in Hca1 Hca2 Hca3 Hca4; do
  for b in Hca1 Hca2 Hca3 Hca4; do
    [[ $a == "$b" ]] && continue
    same_path $a $b
    pairs=$((pairs + 1))
  done
done
ok "ibd's paths between all $pairs pairs of hosts equal saquery's (DLID, SLID, SL, MTU, rate, lifetime)"
# --- ibdctl paths: the cache listed, and flushed (PATH_LIST, PATH_FLUSH) ---
ctl() { "$build/src/tools/ibdctl" --socket "$OPENIB_SANDBOX/$1/ibd.sock" "${@:2}" 2>&1; }
out=$(ctl Hca1 paths) || fail "ibdctl paths on Hca1: $out"
for b in Hca2 Hca3 Hca4; do
  # A row: PORT DGID PKEY DLID SL MTU RATE STATE AGE_S
  awk -v g="${gids[$b]}" -v l="${lid[$b]}" '$1 == 1 && $2 == g && $3 == "0xffff" && $4 == l && $8 == "fresh"' <<<"$out" |
    grep -q . || fail "ibdctl paths on Hca1 lacks the path to $b (${gids[$b]}, LID ${lid[$b]}):
$out"
done
json=$(ctl Hca1 paths --json) || fail "ibdctl paths --json: $json"
listed=$(python3 -c '
import json, sys
j = json.loads(sys.stdin.read())
assert j["total"] == len(j["paths"]), j
print(" ".join(sorted("%s=%d" % (p["dgid"], p["dlid"]) for p in j["paths"] if p["state"] == "fresh")))' <<<"$json") ||
  fail "ibdctl paths --json does not parse as its JSON: $json"
want=$(for b in Hca2 Hca3 Hca4; do echo "${gids[$b]}=${lid[$b]}"; done | sort | xargs)
[[ $listed == "$want" ]] || fail "ibdctl paths --json lists '$listed', expected '$want'"
m0=$(counter Hca1 path_cache_misses)
out=$(ctl Hca1 paths flush "${gids[Hca3]}") || fail "ibdctl paths flush ${gids[Hca3]}: $out"
[[ $out == "1 entries dropped" ]] || fail "flush of Hca3's GID: $out"
! ctl Hca1 paths | grep -q "${gids[Hca3]}" || fail "Hca3's path still listed after its flush"
out=$(path Hca1 "${gids[Hca2]}") || fail "ibdctl path Hca1 -> Hca2: $out"
[[ $(val source <<<"$out") == cache ]] || fail "the flush of Hca3's GID dropped Hca2's path too: $out"
out=$(path Hca1 "${gids[Hca3]}") || fail "ibdctl path Hca1 -> Hca3 after the flush: $out"
[[ $(val source <<<"$out") == sa && $(val dlid <<<"$out") == "${lid[Hca3]}" ]] || fail "path to Hca3 after its flush: $out"
(($(counter Hca1 path_cache_misses) == m0 + 1 && $(counter Hca1 path_cache_flushed) == 1)) ||
  fail "misses $m0 -> $(counter Hca1 path_cache_misses), flushed $(counter Hca1 path_cache_flushed) after one flush and one lookup"
out=$(ctl Hca1 paths flush --port 1) || fail "ibdctl paths flush: $out"
[[ $out == "3 entries dropped" ]] || fail "flush of all: $out"
total=$(ctl Hca1 paths --json | python3 -c 'import json, sys; print(json.load(sys.stdin)["total"])')
[[ $total == 0 ]] || fail "$total paths listed after a flush of all"
ok "ibdctl paths lists Hca1's paths (table, --json); flush of one DGID makes its next lookup a miss, flush of all empties the cache"
# A GID nobody has: "no path" from the SA, then from the negative entry.
nobody=fe80::dead:beef:0:1
if out=$(path Hca2 $nobody); then fail "a path to $nobody: $out"; fi
grep -q "no path" <<<"$out" || fail "path to $nobody: $out"
q1=$(counter Hca2 sa_queries)
if out=$(path Hca2 $nobody); then fail "a path to $nobody: $out"; fi
grep -q "no path" <<<"$out" || fail "path to $nobody (again): $out"
[[ $(counter Hca2 sa_queries) == "$q1" && $(counter Hca2 path_cache_negative_hits) -ge 1 ]] ||
  fail "the second 'no path' asked the SA again"
out=$(path Hca2 --fresh "$(gid_of Hca4)") || fail "ibdctl path --fresh: $out"
[[ $(val source <<<"$out") == sa && $(val dlid <<<"$out") == "${lid[Hca4]}" ]] || fail "path --fresh Hca2 -> Hca4: $out"
if out=$(path Hca2 not-a-gid); then fail "ibdctl path accepted 'not-a-gid': $out"; fi
ok "no path to $nobody (kept as a negative entry); --fresh asks the SA"

# --- GID traps 65/64 reach ibd's path cache (InformInfo subscriptions) -----
waitfor() {  # SECONDS HOST COUNTER MIN: until the counter reaches MIN
  for _ in $(seq $(($1 * 5))); do (($(counter "$2" "$3") >= $4)) && return 0; sleep 0.2; done
  return 1
}
waitfor 10 Hca2 sa_subscriptions 2 || fail "Hca2 did not subscribe to traps 64/65 ($(counter Hca2 sa_subscribe_errors) errors)"
out=$(path Hca2 "$(gid_of Hca4)") || fail "ibdctl path Hca2 -> Hca4: $out"
[[ $(val dlid <<<"$out") == "${lid[Hca4]}" ]] || fail "path Hca2 -> Hca4: $out"
gid4=$(gid_of Hca4)
sb fabric link down Switch2 2 >/dev/null || fail "link down Switch2 2 (Hca4's cable)"
waitfor 30 Hca2 path_cache_gid_out 1 || fail "no trap 65 reached Hca2's path cache after Hca4's cable was pulled"
q2=$(counter Hca2 sa_queries)
if out=$(path Hca2 "$gid4"); then fail "a path to Hca4 with its cable pulled: $out"; fi
grep -q "no path" <<<"$out" || fail "path to Hca4 with its cable pulled: $out"
(($(counter Hca2 sa_queries) > q2)) || fail "the lookup after trap 65 did not ask the SA"
sb fabric link up Switch2 2 >/dev/null || fail "link up Switch2 2"
waitfor 30 Hca2 path_cache_gid_in 1 || fail "no trap 64 reached Hca2's path cache after Hca4's cable came back"
for _ in $(seq 100); do [[ $(field Hca4 State) == Active ]] && break; sleep 0.2; done
[[ $(field Hca4 State) == Active ]] || fail "Hca4 is $(field Hca4 State) after its cable came back"
out=$(path Hca2 "$gid4") || fail "no path to Hca4 after trap 64: $out"
[[ $(val source <<<"$out") == sa && $(val dlid <<<"$out") == "$(lid_of Hca4)" ]] || fail "path Hca2 -> Hca4 after trap 64: $out"
ok "Hca4's cable pulled: trap 65 dropped Hca2's path to it; back: trap 64 dropped the negative entry, the path is found again"

# --- the path cache saved by one ibd and loaded by the next (warm start) ----
# With OpenSM stopped: whatever Hca2 answers after its restart comes from
# the file (the port stays Initializing, no SA to ask).
sb sm Hca1 stop
sb restart Hca2 || fail "restarting Hca2's ibd"
[[ -s $OPENIB_SANDBOX/Hca2/path-cache-port1.bin ]] || fail "Hca2's ibd saved no path cache in $OPENIB_SANDBOX/Hca2"
# The file's tag (docs/sa.md "Cache file"): bytes 24..31, the SM's port
# GUID, learned by a NodeRecord query for the SM's LID: Hca1's.
tag=$(od -An -tx1 -j24 -N8 "$OPENIB_SANDBOX/Hca2/path-cache-port1.bin" | tr -d ' \n')
[[ 0x$tag == "$(field Hca1 "Port GUID")" ]] || fail "Hca2's cache file is tagged with SM port GUID 0x$tag, the SM is Hca1 ($(field Hca1 "Port GUID"))"
waitfor 10 Hca2 path_cache_restored 2 || fail "Hca2 restored $(counter Hca2 path_cache_restored) paths, expected at least 2"
for h in Hca3 Hca4; do
  out=$(path Hca2 "${gids[$h]}") || fail "ibdctl path Hca2 -> $h after the restart, no SM: $out"
  [[ $(val source <<<"$out") == cache && $(val dlid <<<"$out") == "$(lid_of $h)" ]] ||
    fail "path Hca2 -> $h after the restart, no SM: $out"
done
[[ $(counter Hca2 sa_answers) == 0 ]] || fail "an SA answered Hca2 with OpenSM stopped"
sb sm Hca1 start || fail "OpenSM on Hca1 again"
for _ in $(seq 150); do [[ $(field Hca2 State) == Active ]] && break; sleep 0.2; done
[[ $(field Hca2 State) == Active ]] || fail "Hca2 is $(field Hca2 State) after its ibd restarted"
waitfor 30 Hca2 path_cache_revalidations 1 || fail "the restored paths were not revalidated"
[[ $(counter Hca2 path_cache_other_sm) == 0 ]] || fail "Hca2 took OpenSM on Hca1 for another SM than its file's"
ok "Hca2's ibd restarted with OpenSM stopped: $(counter Hca2 path_cache_restored) paths restored from its file (tagged with SM 0x$tag) and served; revalidated once OpenSM was back"

# --- a cable pulled: trap 128, OpenSM resweeps ----------------------------
sweeps() { grep -c -- "-> SUBNET UP" "$OPENIB_SANDBOX/opensm.log" || true; }
# The Switch1 port the route Hca1 -> Hca4 leaves by now (3 or 5); pull it.
via() { sb run Hca1 ibtracert "${lid[Hca1]}" "${lid[Hca4]}" | awk '/"Switch2"/ {gsub(/[][]/, "", $1); print $1; exit}'; }
used=$(via)
[[ $used == 3 || $used == 5 ]] || fail "route Hca1 -> Hca4 leaves Switch1 by '$used'"
other=$((used == 3 ? 5 : 3))
s0=$(sweeps)
sb fabric link down Switch1 "$used" >/dev/null || fail "link down"
for _ in $(seq 100); do
  grep -q "Received Generic Notice type:1 num:128" "$OPENIB_SANDBOX/opensm.log" && (($(sweeps) > s0)) && break
  sleep 0.2
done
grep -q "num:128" "$OPENIB_SANDBOX/opensm.log" || fail "OpenSM got no trap 128"
(($(sweeps) > s0)) || fail "no new sweep (SUBNET UP) after the trap"
now=''
for _ in $(seq 50); do now=$(via); [[ $now == "$other" ]] && break; sleep 0.2; done
[[ $now == "$other" ]] || fail "after pulling Switch1 port $used the route leaves by '$now', not $other"
sb fabric link up Switch1 "$used" >/dev/null || fail "link up"
ok "link down Switch1 $used: trap 128, OpenSM resweeps, the route moves to port $other"

# --- OpenSM stopped on Hca1 and started on Hca3 takes the subnet over ------
light0=$(counter Hca2 path_cache_invalidations_light)
asked() { echo $(($(counter Hca2 path_cache_revalidations) + $(counter Hca2 path_cache_requeried))); }
reval0=$(asked)
sb sm Hca1 stop
sb sm Hca3 start || fail "OpenSM on Hca3"
for h in Hca1 Hca2 Hca3 Hca4; do
  for _ in $(seq 100); do [[ $(field $h "SM lid") == "${lid[Hca3]}" ]] && break; sleep 0.2; done
  [[ $(field $h "SM lid") == "${lid[Hca3]}" ]] || fail "$h: SM lid $(field $h 'SM lid'), expected Hca3's ${lid[Hca3]}"
  [[ $(field $h State) == Active ]] || fail "$h not Active under the new SM"
done
ok "OpenSM moved from Hca1 to Hca3: every port's SM LID is ${lid[Hca3]}"
# The SM change reached ibd's path cache as a light invalidation (IPoIB's
# level): Hca2's entry for Hca3 is stale, still served, and revalidated.
(($(counter Hca2 path_cache_invalidations_light) > light0)) || fail "Hca2's path cache saw no SM change"
for _ in $(seq 100); do (($(asked) > reval0)) && break; sleep 0.2; done
(($(asked) > reval0)) ||
  fail "Hca2's path cache revalidated nothing after the SM change: $(ibdctl_counters Hca2 | grep -E 'path_cache|sa_')
$(grep -E 'port 1|sa:' "$OPENIB_SANDBOX/Hca2/ibd.log" | tail -30)"
out=$(path Hca2 "$(gid_of Hca3)") || fail "ibdctl path after the SM change: $out"
[[ $(val source <<<"$out") == cache && $(val dlid <<<"$out") == "${lid[Hca3]}" ]] || fail "path Hca2 -> Hca3 after the SM change: $out"
ok "the SM change made Hca2's paths stale: served from the cache and revalidated ($(counter Hca2 path_cache_revalidations))"
# ibd's SA client follows the SM: each query goes to the SM LID PortInfo has now.
out=$(path Hca2 --fresh "$(gid_of Hca1)") || fail "ibdctl path --fresh under the new SM: $out"
[[ $(val source <<<"$out") == sa && $(val dlid <<<"$out") == "${lid[Hca1]}" ]] || fail "path Hca2 -> Hca1 under the new SM: $out"
ok "ibd's SA client asks the new SM on Hca3"

# --- a cache file from another SM: its paths go once the SM is known ------
# Hca2's file is now tagged with Hca3's SM; with OpenSM back on Hca1
# instead, the restored paths are dropped, not served until revalidated.
tag_of() { od -An -tx1 -j24 -N8 "$OPENIB_SANDBOX/Hca2/path-cache-port1.bin" | tr -d ' \n'; }
sb sm Hca3 stop
sb restart Hca2 || fail "restarting Hca2's ibd"
[[ 0x$(tag_of) == "$(field Hca3 "Port GUID")" ]] || fail "Hca2's file is tagged 0x$(tag_of), the SM was Hca3"
waitfor 10 Hca2 path_cache_restored 1 || fail "Hca2 restored no paths"
sb sm Hca1 start || fail "OpenSM on Hca1 again"
waitfor 30 Hca2 path_cache_other_sm 1 || fail "Hca2 did not see that its file came from another SM"
for _ in $(seq 150); do [[ $(field Hca2 State) == Active ]] && break; sleep 0.2; done
out=$(path Hca2 "${gids[Hca4]}") || fail "ibdctl path Hca2 -> Hca4 under Hca1's SM: $out"
[[ $(val source <<<"$out") == sa && $(val dlid <<<"$out") == "$(lid_of Hca4)" ]] ||
  fail "path Hca2 -> Hca4 after the file from another SM: $out"
ok "a cache file tagged with Hca3's SM, loaded while Hca1's SM runs: its paths dropped (path_cache_other_sm), asked anew"

# --- unsubscribing at stop: ibd tells the SA it wants no more Reports ----
# SIGTERM (sandbox.sh restart stops the ibd first): traps 64..67 are
# unsubscribed (InformInfo Set, Subscribe 0) and answered by OpenSM
# before ibd exits; the next ibd subscribes again.
unsubs() { grep -c "sa: port 1: unsubscribed from trap" "$OPENIB_SANDBOX/Hca4/ibd.log" || true; }
before=$(unsubs)
sb restart Hca4 || fail "restarting Hca4's ibd"
(($(unsubs) - before == 4)) || fail "Hca4's ibd unsubscribed from $(($(unsubs) - before)) traps as it stopped, not 4:
$(grep "sa: port 1: " "$OPENIB_SANDBOX/Hca4/ibd.log" | tail -12)"
waitfor 30 Hca4 sa_subscriptions 4 || fail "Hca4's new ibd did not subscribe to traps 64..67"
ok "a stopping ibd unsubscribed from traps 64..67 and its successor subscribed again"

# --- the library: PathResolver, the shared table end to end ---------------
# openib-path on Hca2 looks Hca3 up three times: the first through ibd (its
# cache or the SA), the next two in the table ibd published (no message).
out=$(sb run Hca2 "$build/examples/openib-path" "$(gid_of Hca3)" --count 3 2>&1) || fail "openib-path: $out"
mapfile -t rows <<<"$out"
for r in 1 2; do
  [[ ${rows[$r]} == "source table dlid $(lid_of Hca3) "* ]] || fail "openib-path lookup $((r + 1)) is not a table hit to Hca3's LID:
$out"
done
grep -q "^table mapped, hits 2, " <<<"$out" || fail "openib-path's counters: $out"
out=$(sb run Hca2 "$build/examples/openib-path" "$(gid_of Hca3)" --async 2>&1) || fail "openib-path --async: $out"
[[ $out == "source table dlid $(lid_of Hca3) "* ]] || fail "openib-path --async: $out"
ok "libopenib's PathResolver on Hca2: ibd then the shared table twice (no message), sync and async: $(head -1 <<<"$out")"

# --- a path that revalidates to another record: replaced, clients told ----
# Hca2's cache file gets a wrong DLID for Hca4 while its ibd is down (the
# CRC redone: a file that checks); with OpenSM stopped the restarted ibd
# serves it (stale). A client watching (openib-path --watch) gets
# PATH_CHANGED once OpenSM is back and the revalidation answers the real
# DLID, which then replaces the wrong one everywhere.
gid4=$(gid_of Hca4)
lid4=$(lid_of Hca4)
out=$(path Hca2 "$gid4") || fail "ibdctl path Hca2 -> Hca4: $out"
cat >"$OPENIB_SANDBOX/wrong-dlid.py" <<'PY'
import ipaddress, struct, sys, zlib
f, gid, dlid = sys.argv[1], ipaddress.IPv6Address(sys.argv[2]).packed, int(sys.argv[3])
b = bytearray(open(f, 'rb').read())
n, hits = struct.unpack_from('>I', b, 40)[0], 0
for i in range(n):
    rec = 48 + 152 * i + 88  # the answer PathRecord (cache_file_format.hpp)
    if b[rec + 8:rec + 24] == gid:
        struct.pack_into('>H', b, rec + 40, dlid)  # DLID, IBA 15.2.5.16 bit 320
        hits += 1
struct.pack_into('>I', b, len(b) - 4, zlib.crc32(bytes(b[:-4])))
open(f, 'wb').write(b)
sys.exit(0 if hits else 1)
PY
sb sm Hca1 stop
OPENIB_SANDBOX_WHILE_DOWN="python3 $OPENIB_SANDBOX/wrong-dlid.py $OPENIB_SANDBOX/Hca2/path-cache-port1.bin $gid4 99" \
  sb restart Hca2 || fail "restarting Hca2's ibd with a wrong DLID for Hca4 in its file"
bash "$sandbox" run Hca2 "$build/examples/openib-path" "$gid4" --watch 60 >"$OPENIB_SANDBOX/watch.log" 2>&1 &
pp_pid=$!
for _ in $(seq 100); do [[ -s $OPENIB_SANDBOX/watch.log ]] && break; sleep 0.1; done
grep -q "^source table dlid 99 .* stale$" "$OPENIB_SANDBOX/watch.log" ||
  fail "Hca2 did not serve its file's (wrong, stale) path: $(cat "$OPENIB_SANDBOX/watch.log")"
sb sm Hca1 start || fail "OpenSM on Hca1 again"
wait "$pp_pid" || fail "openib-path --watch: $(cat "$OPENIB_SANDBOX/watch.log")"
pp_pid=''
grep -q "^path-changed port 1 pkey 0xffff dgid $gid4$" "$OPENIB_SANDBOX/watch.log" &&
  grep -q "^source after-change dlid $lid4 " "$OPENIB_SANDBOX/watch.log" ||
  fail "no PATH_CHANGED, or the path after it is not Hca4's LID $lid4: $(cat "$OPENIB_SANDBOX/watch.log")"
out=$(path Hca2 "$gid4") || fail "ibdctl path Hca2 -> Hca4 after the change: $out"
[[ $(val dlid <<<"$out") == "$lid4" ]] || fail "ibd kept the wrong path after revalidation: $out"
ok "a cached path revalidated to another record (DLID 99 -> $lid4): replaced in ibd and the table, PATH_CHANGED to the watching client"
echo "PASS: net.2sw2path4hca through OpenSM and infiniband-diags"
exit 0
