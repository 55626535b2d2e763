#!/usr/bin/env bash
# Issue 15's multicast joins and service registrations on the sandbox
# (scripts/sandbox.sh, net.2sw2path4hca, Debian's OpenSM): ibd's joins
# (ibdctl mcast join --hold) seen by `saquery -m`, its ServiceRecords
# (ibdctl service set --hold) by `saquery -S`, both gone when the holder
# ends, both back after OpenSM restarts; traps 66/67 counted.
# Then issue 29's attacks by user nobody on Hca2's ibd (IPoIB and its ATS
# records on): its SERVICE_SETs neither replace nor delete the host's ATS
# record nor root's record of the same key; 40 connections of nobody hold
# no more groups than --uid-max-mcast-joins and leave none behind; IPoIB's
# broadcast group is not nobody's to join.
#   mcast.sh BUILD_DIR  (OPENIB_SANDBOX_PREFIX: the sandbox's names, sbm)
set -euo pipefail
build=$(cd "$1" && pwd)
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
topo=/usr/share/doc/ibsim-utils/net-examples/net.2sw2path4hca
# shellcheck source=lib.sh
source "$here/lib.sh"
sandbox_test "${OPENIB_SANDBOX_PREFIX:-sbm}" 198.18.20 mcast-test
ibdctl=$build/src/tools/ibdctl
# IPoIB (ATS records), a socket nobody can reach, a per-uid multicast bound.
kUidJoins=24
export OPENIB_SANDBOX_IBD_ARGS="--ipoib ib0 --socket-mode 0666 --uid-max-mcast-joins $kUidJoins"
# shellcheck source=../../scripts/unprivileged.sh
source "$here/../../scripts/unprivileged.sh"
nb=$(mktemp -d)
chmod 755 "$nb"

field() { sb run "$1" ibstat simhca0 1 | awk -F': ' -v k="$2" '$1 ~ k {print $2}'; }
gid_of() {
  local g
  g=$(field "$1" "Port GUID")
  g=${g#0x}
  printf 'fe80::%x:%x:%x:%x' $((16#${g:0:4})) $((16#${g:4:4})) $((16#${g:8:4})) $((16#${g:12:4}))
}
counter() { "$ibdctl" --socket "$OPENIB_SANDBOX/$1/ibd.sock" counters | awk -v k="$2" '$1 == k {print $2}'; }

# hold NAME HOST ARGS...: `ibdctl ARGS --hold` on HOST's ibd in the
# background, its stdin a FIFO the test keeps open; waits (10 s) for its
# one line. ${held[NAME]} is its PID.
declare -A held
hold() {
  local name=$1 host=$2 fifo=$OPENIB_SANDBOX/$1.fifo
  shift 2
  mkfifo "$fifo"
  OPENIB_SOCKET=$OPENIB_SANDBOX/$host/ibd.sock "$ibdctl" "$@" --hold <>"$fifo" >"$OPENIB_SANDBOX/$name.out" 2>&1 &
  held[$name]=$!
  for _ in $(seq 100); do
    [[ -s $OPENIB_SANDBOX/$name.out ]] && break
    kill -0 "${held[$name]}" 2>/dev/null || break
    sleep 0.1
  done
  grep -q "^joined\|^registered" "$OPENIB_SANDBOX/$name.out" || fail "ibdctl $* on $host: $(cat "$OPENIB_SANDBOX/$name.out")"
}
# release NAME [SIGNAL]: ends a holder (TERM: it leaves / deletes itself;
# KILL: ibd does it as the connection goes).
release() {
  kill -"${2:-TERM}" "${held[$1]}" 2>/dev/null || true
  wait "${held[$1]}" 2>/dev/null || true
  unset "held[$1]"
}
cleanup_holders() {
  for p in "${held[@]}" "${swarm[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$nb"
  sandbox_cleanup
}
swarm=()
trap cleanup_holders EXIT

# until_sa HOST OPTION PATTERN present|absent: waits (at most 15 s) until
# `saquery OPTION` on HOST shows (or no longer shows) a record matching the
# regex PATTERN; records are joined into one line each. OpenSM shows members
# (PortGid, JoinState) only to a trusted query: its default SM_Key, 1.
records() { sb run "$1" saquery --smkey 1 "$2" 2>/dev/null | awk '/dump:$/ {if (r) print r; r=""; next} {gsub(/[ \t]+/, " "); r = r $0} END {if (r) print r}'; }
until_sa() {
  for _ in $(seq 75); do
    if records "$1" "$2" | grep -qE "$3"; then [[ $4 == present ]] && return 0
    else [[ $4 == absent ]] && return 0; fi
    sleep 0.2
  done
  return 1
}

sb up "$topo" --sm Hca1 || fail "sandbox up"
for h in Hca1 Hca2 Hca3 Hca4; do
  for _ in $(seq 50); do [[ $(field $h State) == Active ]] && break; sleep 0.2; done
  [[ $(field $h State) == Active ]] || fail "$h port 1 is $(field $h State)"
done
gid2=$(gid_of Hca2)
gid3=$(gid_of Hca3)
mgid=ff12:1234:ffff::1
# saquery prints the MGID and PortGid in full IPv6 notation.
full() { python3 -c 'import ipaddress,sys; print(ipaddress.IPv6Address(sys.argv[1]).exploded)' "$1"; }
# A member line of group $mgid for port GID $1 (saquery -m's fields).
member_re() { echo "MGID\.*($mgid|$(full $mgid)) .*PortGid\.*($1|$(full "$1")) "; }

# --- one host joins: the group is created, Hca2 a FullMember --------------
for _ in $(seq 50); do (($(counter Hca2 sa_subscriptions) >= 4)) && break; sleep 0.2; done
created0=$(counter Hca2 sa_mcast_created_reports)
hold j2 Hca2 mcast join "$mgid" --qkey 0x1234
until_sa Hca4 -m "$(member_re "$gid2")" present || fail "saquery -m has no member $gid2 of $mgid: $(records Hca4 -m)"
line=$(records Hca4 -m | grep -E "$(member_re "$gid2")")
# ScopeState: scope in bits 7:4, JoinState in bits 3:0 (FullMember 1).
grep -qE "ScopeState\.*0x[0-9a-f]?1 " <<<"$line" ||
  fail "Hca2's membership is not FullMember: $line"
grep -q "^joined .* qkey 0x1234 " "$OPENIB_SANDBOX/j2.out" || fail "join answer: $(cat "$OPENIB_SANDBOX/j2.out")"
ok "Hca2 joined $mgid: saquery -m shows PortGid $gid2 FullMember ($(cat "$OPENIB_SANDBOX/j2.out"))"
for _ in $(seq 50); do (($(counter Hca2 sa_mcast_created_reports) > created0)) && break; sleep 0.2; done
(($(counter Hca2 sa_mcast_created_reports) > created0)) || fail "no trap 66 Report counted on Hca2"
ok "trap 66 (group created) Report counted: sa_mcast_created_reports $(counter Hca2 sa_mcast_created_reports)"

# --- a second host joins; the first leaves; the group stays ---------------
hold j3 Hca3 mcast join "$mgid" --qkey 0x1234
until_sa Hca4 -m "$(member_re "$gid3")" present || fail "saquery -m has no member $gid3: $(records Hca4 -m)"
release j2 TERM
until_sa Hca4 -m "$(member_re "$gid2")" absent || fail "Hca2 still a member after its leave: $(records Hca4 -m)"
records Hca4 -m | grep -qE "$(member_re "$gid3")" || fail "Hca3's membership went with Hca2's leave: $(records Hca4 -m)"
ok "Hca3 joined too; Hca2 left (MCAST_LEAVE): the group stays with Hca3"

# --- a ServiceRecord, with a lease ibd renews ------------------------------
hold s2 Hca2 service set --id 0x10000ce1 --name openib-mcast-test --lease 4
until_sa Hca4 -S "ServiceName\.*openib-mcast-test" present || fail "saquery -S lacks the service: $(records Hca4 -S)"
records Hca4 -S | grep "openib-mcast-test" | grep -qE "ServiceGID\.*($gid2|$(full "$gid2"))" ||
  fail "the ServiceRecord's GID is not Hca2's: $(records Hca4 -S | grep openib-mcast-test)"
sleep 6  # past its 4 s lease: still there, renewed
records Hca4 -S | grep -q "openib-mcast-test" || fail "the service lapsed: its 4 s lease was not renewed"
(($(counter Hca2 service_renewals) >= 1)) || fail "no lease renewal counted on Hca2"
ok "ServiceRecord set by Hca2 in saquery -S, its 4 s lease renewed ($(counter Hca2 service_renewals) renewals)"

# --- OpenSM restarted: the join and the registration come back -------------
rejoins0=$(counter Hca3 mcast_rejoins)
sb sm Hca1 stop
sb sm Hca1 start || fail "OpenSM on Hca1 again"
until_sa Hca4 -m "$(member_re "$gid3")" present || fail "Hca3's join not redone after OpenSM restarted: $(records Hca4 -m)
$(grep -E 'sa:' "$OPENIB_SANDBOX/Hca3/ibd.log" | tail -20)"
until_sa Hca4 -S "ServiceName\.*openib-mcast-test" present || fail "the service not registered again: $(records Hca4 -S)"
(($(counter Hca3 mcast_rejoins) > rejoins0)) || fail "Hca3 counted no rejoin"
ok "OpenSM restarted: Hca3's join and Hca2's ServiceRecord are back in saquery"

# --- OpenSM moved to Hca4: a new SM, its database empty --------------------
# SM_CHANGE / ClientReregister on every port: the joins, the registration
# and the trap subscriptions are redone with the new SM (IBA 14.4.11).
rejoins0=$(counter Hca3 mcast_rejoins)
subs0=$(counter Hca3 sa_subscriptions)
sb sm Hca1 stop
sb sm Hca4 start || fail "OpenSM on Hca4"
until_sa Hca2 -m "$(member_re "$gid3")" present || fail "Hca3's join not redone with the SM on Hca4: $(records Hca2 -m)"
until_sa Hca2 -S "ServiceName\.*openib-mcast-test" present || fail "the service not registered with the SM on Hca4: $(records Hca2 -S)"
until_sa Hca2 IIR "($gid3|$(full "$gid3"))" present || fail "no InformInfoRecord of Hca3 at the SM on Hca4: $(records Hca2 IIR)"
(($(counter Hca3 mcast_rejoins) > rejoins0)) || fail "Hca3 counted no rejoin after the SM moved"
(($(counter Hca3 sa_subscriptions) >= subs0 + 4)) || fail "Hca3 subscribed $(($(counter Hca3 sa_subscriptions) - subs0)) traps again, not 4"
ok "OpenSM moved to Hca4: Hca3's join, Hca2's ServiceRecord and Hca3's trap subscriptions (saquery IIR) are redone"

# --- the holders killed: ibd leaves and deletes for them --------------------
deleted0=$(counter Hca2 sa_mcast_deleted_reports)
release s2 KILL
until_sa Hca4 -S "ServiceName\.*openib-mcast-test" absent || fail "the service outlived its client: $(records Hca4 -S)"
release j3 KILL
until_sa Hca4 -m "MGID\.*($mgid|$(full $mgid)) " absent || fail "the group outlived its members: $(records Hca4 -m)"
ok "holders killed: ibd deleted the ServiceRecord and left the group (it is gone)"
for _ in $(seq 50); do (($(counter Hca2 sa_mcast_deleted_reports) > deleted0)) && break; sleep 0.2; done
(($(counter Hca2 sa_mcast_deleted_reports) > deleted0)) || fail "no trap 67 Report counted on Hca2"
ok "trap 67 (group deleted) Report counted: sa_mcast_deleted_reports $(counter Hca2 sa_mcast_deleted_reports)"
# --- issue 29: user nobody against the SA through Hca2's ibd ----------------
# nobody's ibdctl: a copy it can run, a link to Hca2's socket it can reach.
reachable_copy "$nb/bin" "$ibdctl"
ln "$OPENIB_SANDBOX/Hca2/ibd.sock" "$nb/ibd.sock"
as_nobody() { "${AS_NOBODY[@]}" env LD_LIBRARY_PATH="$nb/bin/lib" OPENIB_SOCKET="$nb/ibd.sock" "$nb/bin/ibdctl" "$@"; }
ats="DAPL Address Translation Service"
ib0_up Hca2 198.19.20.2/24
# One record per address: 198.19.20.2 (ServiceData8 13..16) and ib0's link-local fe80::.
until_sa Hca4 -S "ServiceName\.*$ats .*ServiceData8\.13\.*0xC6 ServiceData8\.14\.*0x13 ServiceData8\.15\.*0x14 ServiceData8\.16\.*0x2 " present ||
  fail "no ATS record of Hca2's 198.19.20.2: $(records Hca4 -S)"
until_sa Hca4 -S "ServiceName\.*$ats ServiceData8\.1\.*0xFE ServiceData8\.2\.*0x80 " present ||
  fail "no ATS record of Hca2's link-local address: $(records Hca4 -S)"
ats_before=$(records Hca4 -S | grep "$ats" | sort)
grep -qE "ServiceGID\.*($gid2|$(full "$gid2"))" <<<"$ats_before" || fail "the ATS record is not Hca2's: $ats_before"

# Finding 2: an ATS record with ServiceGID 0 (the SA's key: Hca2's GID).
out=$(as_nobody service set --id 0x10000CE100415453 --name "$ats" 2>&1) && fail "nobody registered an ATS record: $out"
grep -qi "permission denied\|ATS records are ibd's" <<<"$out" || fail "nobody's ATS record: $out"
out=$(as_nobody service set --id 0x10000CE107415453 --name other 2>&1) && fail "nobody registered ATS slot 7: $out"
out=$(as_nobody service set --id 0x29 --name "$ats" 2>&1) && fail "nobody registered the ATS name: $out"
sleep 1
[[ $(records Hca4 -S | grep "$ats" | sort) == "$ats_before" ]] || fail "the ATS records changed: $(records Hca4 -S | grep "$ats")"
ok "nobody's ATS SERVICE_SETs refused ($(head -1 <<<"$out")); saquery -S shows Hca2's ATS records unchanged"

# Root's record naming Hca2's GID, nobody's of the same key with GID 0.
hold r29 Hca2 service set --id 0x2900 --name root-29 --gid "$gid2"
until_sa Hca4 -S "ServiceName\.*root-29" present || fail "root's record not in saquery -S: $(records Hca4 -S)"
out=$(as_nobody service set --id 0x2900 --name nobody-29 2>&1) && fail "nobody replaced root's record: $out"
grep -qi "exists\|another client" <<<"$out" || fail "nobody's record of root's key: $out"
sleep 1
records Hca4 -S | grep -q "nobody-29" && fail "saquery -S has nobody's record: $(records Hca4 -S | grep 29)"
records Hca4 -S | grep -q "root-29" || fail "root's record went with nobody's attempt: $(records Hca4 -S)"
ok "nobody's GID-0 record of root's key (ServiceID, Hca2's GID, P_Key): $(head -1 <<<"$out"); root's stays"
release r29 TERM
until_sa Hca4 -S "ServiceName\.*root-29" absent || fail "root's record outlived its holder"

# Finding 6: 40 connections of nobody, one group each: at most
# --uid-max-mcast-joins of them joined; their groups gone once they are killed.
swarm_re="MGID\.*(ff12:2929:ffff::|ff12:2929:ffff:0000:0000:0000:0000:)[0-9a-f]+ .*PortGid\.*($gid2|$(full "$gid2")) "
mkfifo "$OPENIB_SANDBOX/swarm.fifo"  # their stdin: never closed, so they hold until killed
for i in $(seq 0 39); do
  as_nobody mcast join "ff12:2929:ffff::$(printf %x $((i + 1)))" --qkey 0x2929 --hold <>"$OPENIB_SANDBOX/swarm.fifo" \
    >"$OPENIB_SANDBOX/swarm$i.out" 2>&1 &
  swarm+=($!)
done
for _ in $(seq 100); do
  # (grep -l finding none yet is no failure: set -e and pipefail would end the script)
  n=$({ grep -l "^joined\|rror\|quota\|limit" "$OPENIB_SANDBOX"/swarm*.out 2>/dev/null || true; } | wc -l)
  ((n == 40)) && break
  sleep 0.2
done
joined=$({ grep -l "^joined" "$OPENIB_SANDBOX"/swarm*.out || true; } | wc -l)
((joined == kUidJoins)) || fail "nobody's 40 connections joined $joined groups, the per-uid bound is $kUidJoins: $(cat "$OPENIB_SANDBOX"/swarm0.out "$OPENIB_SANDBOX"/swarm39.out)"
until_sa Hca4 -m "$swarm_re" present || fail "saquery -m shows none of nobody's groups"
at_sa=$(records Hca4 -m | grep -cE "$swarm_re" || true)
((at_sa == kUidJoins)) || fail "saquery -m shows $at_sa of nobody's groups, not $kUidJoins"
refused=$({ grep -l "per uid" "$OPENIB_SANDBOX"/swarm*.out || true; } | wc -l)
((refused == 40 - kUidJoins)) || fail "$refused joins refused for the per-uid bound: $(grep -h . "$OPENIB_SANDBOX"/swarm*.out | sort | uniq -c)"
ok "40 connections of nobody: $joined groups joined (saquery -m: $at_sa), $refused refused: $(grep -h "per uid" "$OPENIB_SANDBOX"/swarm*.out | head -1)"
{
  for p in "${swarm[@]}"; do kill -KILL "$p" || true; done
  for p in "${swarm[@]}"; do wait "$p" || true; done
} 2>/dev/null  # the shell's "Killed" for each
swarm=()
until_sa Hca4 -m "$swarm_re" absent || fail "nobody's groups outlived its connections: $(records Hca4 -m | grep -cE "$swarm_re") left"
((${#swarm[@]} == 0)) && ok "nobody's connections killed: saquery -m shows none of their groups"

# Finding 7: IPoIB's groups are ibd's (RFC 4391 section 4).
out=$(as_nobody mcast join ff12:401b:ffff::ffff:ffff --qkey 0xbad 2>&1) && fail "nobody joined IPoIB's broadcast group: $out"
grep -qi "permission denied\|IPoIB's multicast groups" <<<"$out" || fail "nobody's broadcast join: $out"
out=$(OPENIB_SOCKET=$OPENIB_SANDBOX/Hca2/ibd.sock "$ibdctl" mcast join ff12:601b:ffff::1 --qkey 0xbad 2>&1) &&
  fail "root's client joined IPoIB's all-nodes group: $out"
ok "MCAST_JOIN of IPoIB's groups refused for nobody and root: $(head -1 <<<"$out")"
# After them, the SM moves back to Hca1 (an empty database): Hca2's
# IPoIB rejoins its broadcast group with its own parameters and stays up.
ipoib_state() { "$ibdctl" --socket "$OPENIB_SANDBOX/Hca2/ibd.sock" ipoib --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["state"])'; }
bcast_re="MGID\.*(ff12:401b:ffff::ffff:ffff|$(full ff12:401b:ffff::ffff:ffff)) .*PortGid\.*($gid2|$(full "$gid2")) "
rejoins0=$(counter Hca2 mcast_rejoins)
sb sm Hca4 stop
sb sm Hca1 start || fail "OpenSM on Hca1 again"
for _ in $(seq 75); do (($(counter Hca2 mcast_rejoins) > rejoins0)) && break; sleep 0.2; done
(($(counter Hca2 mcast_rejoins) > rejoins0)) || fail "Hca2 counted no rejoin after the SM moved back"
until_sa Hca1 -m "$bcast_re" present || fail "Hca2 is no member of the broadcast group: $(records Hca1 -m)"
[[ $(ipoib_state) == up ]] || fail "Hca2's IPoIB is $(ipoib_state) after the SM moved back"
(($(counter Hca2 mcast_lost) == 0)) || fail "Hca2 lost $(counter Hca2 mcast_lost) groups at the rejoin"
(($(counter Hca2 mcast_bad_create) == 0)) || fail "creation components refused: $(counter Hca2 mcast_bad_create)"
ok "OpenSM back on Hca1: Hca2's IPoIB rejoined its broadcast group (saquery -m) and is $(ipoib_state)"
echo "PASS: multicast joins and ServiceRecords through OpenSM's SA; issue 29's attacks by nobody refused"
exit 0
