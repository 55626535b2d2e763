#!/usr/bin/env bash
# Scale of the sandbox (docs/performance.md "Scale: the sandbox"): brings
# up two-level fat trees (scripts/fattree.sh) with scripts/sandbox.sh and
# OpenSM on Hca1, and prints for each size the time to SUBNET UP (from the
# start of `sandbox.sh up` and from OpenSM's start), the memory of a host
# (ibd + its simhca, PSS and RSS), of ibfabric and of OpenSM, and with
# --paths the number of PathRecords `saquery -p` returns.
#
#   bench/sandbox-scale.sh [--build DIR] [--paths] [SIZE...]
#
# SIZE is 32, 128 or 324 (default: all three), the fat trees
# 2x16/2, 8x16/4, 18x18/9 (leaves x hosts per leaf / spines). Runs as
# root; its sandbox (prefix sbs, 198.19.0.0/22) coexists with a user's and
# a test's. Every sandbox it brings up it takes down, also on failure.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=$here/../build
paths=0
sizes=()
while (($#)); do
  case $1 in
    --build) build=$2; shift 2 ;;
    --paths) paths=1; shift ;;
    32 | 128 | 324) sizes+=("$1"); shift ;;
    *) echo "usage: sandbox-scale.sh [--build DIR] [--paths] [32|128|324...]" >&2; exit 2 ;;
  esac
done
((${#sizes[@]})) || sizes=(32 128 324)
build=$(cd "$build" && pwd)
[[ $(id -u) == 0 ]] || { echo "sandbox-scale: must run as root" >&2; exit 1; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/sandbox-scale-XXXXXX")
export OPENIB_BUILD=$build OPENIB_SANDBOX_PREFIX=sbs OPENIB_SANDBOX_NET=198.19.0.0/22
export OPENIB_SANDBOX=$tmp/sandbox
sb() { bash "$here/../scripts/sandbox.sh" "$@"; }
cleanup() {
  [[ -e $OPENIB_SANDBOX/hosts ]] && sb down
  rm -rf "$tmp"
}
trap cleanup EXIT

# kB of PSS and RSS of the processes PIDs, summed: "PSS RSS".
mem() {
  local p pss=0 rss=0 a b
  for p in "$@"; do
    read -r a b < <(awk '/^Pss:/ {p = $2} /^Rss:/ {r = $2} END {print p + 0, r + 0}' "/proc/$p/smaps_rollup" 2>/dev/null) || continue
    pss=$((pss + a)) rss=$((rss + b))
  done
  echo "$pss $rss"
}
t() { awk -v k="$1" '$1 == k {print $2}' "$OPENIB_SANDBOX/timing"; }
diff_s() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.1f", b - a}'; }

declare -A shape=([32]="2 16 2" [128]="8 16 4" [324]="18 18 9")
last=opensm_pss_kB
((paths)) && last+=" paths"
printf '%-6s %-9s %-8s %-10s %-10s %-14s %-14s %-14s %s\n' hosts switches up_s hosts_s sm_s \
  host_pss_kB host_rss_kB fabric_pss_kB "$last"
for n in "${sizes[@]}"; do
  read -r l h s <<<"${shape[$n]}"
  topo=$tmp/fattree-$n.net
  bash "$here/../scripts/fattree.sh" $l $h $s >"$topo"
  echo "--- $n hosts: load average $(cut -d' ' -f1-3 /proc/loadavg) before 'up'" >&2
  sb up "$topo" --sm Hca1 2>"$tmp/up.log" || { cat "$tmp/up.log" >&2; exit 1; }
  grep -E "up:|SUBNET UP" "$tmp/up.log" >&2
  up_s=$(diff_s "$(t up_start)" "$(t subnet_up)")
  hosts_s=$(diff_s "$(t up_start)" "$(t hosts_ready)")
  sm_s=$(diff_s "$(t sm_start)" "$(t subnet_up)")
  # Per host: every process in its namespace (ibd and the simhca it
  # spawned); Hca1 also runs OpenSM and is left out of the average.
  tot_pss=0 tot_rss=0 counted=0
  for ((i = 1; i < n; i++)); do
    mapfile -t pids < <(ip netns pids "sbs-$i")
    read -r a b < <(mem "${pids[@]}")
    tot_pss=$((tot_pss + a)) tot_rss=$((tot_rss + b)) counted=$((counted + 1))
  done
  read -r fab _ < <(mem "$(cat "$OPENIB_SANDBOX/ibfabric.pid")")
  read -r osm _ < <(mem "$(cat "$OPENIB_SANDBOX/opensm.pid")")
  np=''
  if ((paths)); then
    np=$(sb run Hca$n saquery -t 60000 -p 2>/dev/null | grep -c "PathRecord dump" || true)
  fi
  printf '%-6s %-9s %-8s %-10s %-10s %-14s %-14s %-14s %s\n' "$n" $((l + s)) "$up_s" "$hosts_s" "$sm_s" \
    $((tot_pss / counted)) $((tot_rss / counted)) "$fab" "$osm${np:+ $np}"
  echo "--- load average $(cut -d' ' -f1-3 /proc/loadavg) after" >&2
  sb down
done
