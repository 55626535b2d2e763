#!/usr/bin/env bash
# Path lookups through ibd (docs/performance.md "Path lookups", "Through
# ibd"): in a sandbox of ibsim's net.2sw2path4hca with OpenSM on Hca1,
#   (a) a cached PATH_QUERY over ibd's socket (one client, round robin
#       over Hca1's paths to the other three hosts),
#   (b) an SA query to OpenSM through ibd (PATH_QUERY with kPathFresh),
#       and their ratio (b)/(a), both measured in this run;
#   (c) a burst: 10 clients at once, 1,000 lookups each over the same 100
#       DGIDs never asked before (3 hosts, 97 nobody has): the SA queries
#       ibd made (INFO's sa_queries before and after; target <= 100);
#   (d) Hca2's ibd restarted with OpenSM stopped: each of its cached paths
#       answered (from the file) while its SA client has no answer yet.
#
#   bench/sa.sh [--build DIR] [--hits N]
#
# Runs as root; prefix sbq, 198.18.23.0/24. Every sandbox it brings up it
# takes down, also on failure. Prints the load average with the figures.
set -euo pipefail
bench=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=$bench/../build
hits=5000
while (($#)); do
  case $1 in
    --build) build=$2; shift 2 ;;
    --hits) hits=$2; shift 2 ;;
    *) echo "usage: sa.sh [--build DIR] [--hits N]" >&2; exit 2 ;;
  esac
done
build=$(cd "$build" && pwd)
[[ $(id -u) == 0 ]] || { echo "sa.sh: must run as root" >&2; exit 1; }
here=$bench/../test/sandbox
# shellcheck source=../test/sandbox/lib.sh
source "$here/lib.sh"  # sb, field, counter, gid_of; fail, ok
sandbox_test sbq 198.18.23 sa-bench
topo=/usr/share/doc/ibsim-utils/net-examples/net.2sw2path4hca
lookups() { python3 "$bench/sa_lookups.py" "$OPENIB_SANDBOX/$1/ibd.sock" "${@:2}"; }

sb up "$topo" --sm Hca1 >/dev/null || fail "sandbox up"
for h in Hca1 Hca2 Hca3 Hca4; do
  for _ in $(seq 150); do [[ $(field $h State) == Active ]] && break; sleep 0.2; done
  [[ $(field $h State) == Active ]] || fail "$h is not Active"
done
declare -A gids
for h in Hca1 Hca2 Hca3 Hca4; do gids[$h]=$(gid_of $h); done
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"

# (a), (b)
hit=$(lookups Hca1 time "$hits" "${gids[Hca2]}" "${gids[Hca3]}" "${gids[Hca4]}")
sa=$(lookups Hca1 time 60 --fresh "${gids[Hca2]}" "${gids[Hca3]}" "${gids[Hca4]}")
echo "(a) cached PATH_QUERY through ibd's socket: $hit ns ($hits lookups)"
echo "(b) SA query to OpenSM through ibd (--fresh): $sa ns (60 queries)"
echo "    ratio (b)/(a): $(python3 -c "print(f'{$sa / $hit:.1f}')")"

# (c)
burst=("${gids[Hca2]}" "${gids[Hca3]}" "${gids[Hca4]}")
for i in $(seq 97); do burst+=("fe80::dead:beef:1:$(printf %x "$i")"); done
# Fresh: Hca1's cache emptied first (its paths to the 3 hosts are in it).
"$build/src/tools/ibdctl" --socket "$OPENIB_SANDBOX/Hca1/ibd.sock" paths flush >/dev/null
q0=$(counter Hca1 sa_queries)
c0=$(counter Hca1 path_cache_coalesced)
t0=$EPOCHREALTIME
pids=()
for c in $(seq 0 9); do
  # Each client starts at another tenth of the list.
  lookups Hca1 burst 1000 "${burst[@]:$((c * 10))}" "${burst[@]:0:$((c * 10))}" >"$OPENIB_SANDBOX/burst$c" &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p" || fail "a burst client failed"; done
t1=$EPOCHREALTIME
answered=$(cat "$OPENIB_SANDBOX"/burst* | paste -sd+ | bc)
q1=$(counter Hca1 sa_queries)
echo "(c) 10 clients x 1,000 lookups over 100 fresh DGIDs: $answered answered in $(python3 -c "print(f'{$t1 - $t0:.2f}')") s;" \
  "SA queries $((q1 - q0)) (target <= 100), coalesced $(($(counter Hca1 path_cache_coalesced) - c0))"

# (d)
for h in Hca1 Hca3 Hca4; do lookups Hca2 time 1 "${gids[$h]}" >/dev/null; done
sb sm Hca1 stop
sb restart Hca2 >/dev/null || fail "restart Hca2"
for _ in $(seq 50); do (($(counter Hca2 path_cache_restored) >= 3)) && break; sleep 0.2; done
ns=$(lookups Hca2 time 30 "${gids[Hca1]}" "${gids[Hca3]}" "${gids[Hca4]}") || fail "a cached path not served after the restart"
echo "(d) after a restart with OpenSM stopped: Hca2's 3 cached paths answered, $ns ns per lookup" \
  "(restored $(counter Hca2 path_cache_restored), stale hits $(counter Hca2 path_cache_stale_hits), SA answers $(counter Hca2 sa_answers))"
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
