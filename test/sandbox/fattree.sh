#!/usr/bin/env bash
# A 32-host fat tree (scripts/fattree.sh 2 16 2: 2 leaves, 2 spines) in the
# sandbox (scripts/sandbox.sh) with Debian's OpenSM: every port Active,
# every path in the SA, ibd's paths equal saquery's, and RC traffic
# between hosts on different leaves.
# Larger trees are a benchmark (bench/sandbox-scale.sh).
#   fattree.sh BUILD_DIR
set -euo pipefail
build=$(cd "$1" && pwd)
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib.sh
source "$here/lib.sh"
sandbox_test sbu 198.18.12.0/22 fattree-test
topo=$OPENIB_SANDBOX.net

bash "$here/../../scripts/fattree.sh" 2 16 2 >"$topo"
sb up "$topo" --sm Hca1 || fail "sandbox up"
hosts=$(sb hosts)
(($(wc -l <<<"$hosts") == 32)) || fail "sandbox hosts: $hosts"
ok "32 hosts up, OpenSM on Hca1: SUBNET UP"

# Every cable up: each leaf has 16 host ports and 16 up-links, each spine
# 16 down-links (96 switch ports), and the 32 CA ports.
links=$(sb run Hca17 iblinkinfo 2>&1) || fail "iblinkinfo: $links"
n=$(grep -c "Active/ *LinkUp" <<<"$links" || true)
((n == 128)) || fail "iblinkinfo: $n ports Active/LinkUp, expected 128"
ok "iblinkinfo: 96 switch ports and 32 CA ports Active/LinkUp"

# The SA knows every path: 36 LIDs (32 CAs, 4 switches) squared.
# Asked again (bounded) while it answers fewer: right after SUBNET UP on a
# loaded machine one query may time out.
for _ in $(seq 10); do
  dump=$(sb run Hca32 saquery -p 2>&1 || true)
  n=$(grep -c "PathRecord dump" <<<"$dump" || true)
  ((n == 36 * 36)) && break
  sleep 1
done
((n == 36 * 36)) || fail "saquery -p: $n PathRecords, expected 1296: $(grep -v "PathRecord dump\|^[[:space:]]" <<<"$dump" | tail -3)"
ok "saquery -p: 1296 PathRecords"

# ibd's SA client (issue 15): every host resolves a path through its ibd
# (`ibdctl path`), each host once as the source and once as the
# destination: Hca i to Hca i+16 (the other leaf, through a spine) and
# Hca i to Hca i+1 (mostly the same leaf); DLID, SLID, SL, MTU, rate and
# lifetime equal saquery's for the pair (lib.sh same_path).
declare -A gids
for i in $(seq 32); do gids[Hca$i]=$(gid_of Hca$i); done
for i in $(seq 32); do
  same_path Hca$i Hca$(((i + 15) % 32 + 1))
  same_path Hca$i Hca$((i % 32 + 1))
done
ok "64 paths through ibd (every host twice as source and twice as destination, across and within leaves) equal saquery's"

# Then every ordered pair (992): each host's ibd asked for a path to every
# other host, compared with the record for the same SLID/DLID in the one
# `saquery -p` table above (a GetTable of 1296 records: RMPP through
# ibd's MAD layer).
declare -A sa_path
while read -r slid dlid sl mtu rate life; do
  sa_path[$((slid)):$((dlid))]="$((sl)) $((128 << (mtu & 63))) $((rate & 63)) $((life & 63))"
done < <(awk -F'[.]+' '
  function out() { if (n) print r["slid"], r["dlid"], r["sl"], r["mtu"], r["rate"], r["pkt_life"] }
  /PathRecord dump/ { out(); n = 1; split("", r); next }
  { k = $1; gsub(/^[ \t]+/, "", k); r[k] = $2 }
  END { out() }' <<<"$dump")
((${#sa_path[@]} == 36 * 36)) || fail "read ${#sa_path[@]} PathRecords from saquery -p, expected 1296"
pairs=0
for i in $(seq 32); do
  for j in $(seq 32); do
    ((i == j)) && continue
    out=$(path Hca$i "${gids[Hca$j]}") || fail "ibdctl path Hca$i -> Hca$j: $out"
    read -r key mine < <(awk '{v[$1] = $2} END {printf "%d:%d %d %d %d %d\n", v["slid"], v["dlid"], v["sl"], v["mtu"], v["rate"], v["packet_life_time"]}' <<<"$out")
    [[ ${sa_path[$key]-none} == "$mine" ]] ||
      fail "Hca$i -> Hca$j: ibd's path $key (SL MTU rate lifetime: $mine), saquery's: ${sa_path[$key]-none}"
    pairs=$((pairs + 1))
  done
done
((pairs == 992)) || fail "$pairs pairs compared"
ok "all 992 ordered host pairs: ibd's path equals the record of saquery's 1296-record table for its SLID/DLID"

# RC between Hca1 (Leaf1) and Hca32 (Leaf2): through a spine.
addr1=$(awk '$1 == "Hca1" {sub("addr=", "", $3); print $3}' <<<"$hosts")
[[ $addr1 == 198.18.12.10 ]] || fail "Hca1's address is '$addr1'"
rc_pingpong Hca1 Hca32 "$addr1" 100
ok "RC pingpong Hca32 -> Hca1 across the spines: 100 x 4 KiB"
echo "PASS: a 32-host fat tree through OpenSM"
