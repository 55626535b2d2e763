#!/usr/bin/env bash
# Runs openib-bench (docs/performance.md): starts two ibd daemons, each with
# its embedded simhca, cabled back to back over UDP on 127.0.0.1 (LIDs 1
# and 2), runs the bench against them, stops them by PID.
#
#   bash bench/run.sh [BUILD_DIR] [-- openib-bench options, e.g. --quick]
#
# BUILD_DIR defaults to build/ (as scripts/ use). Exit status: the bench's.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=${1:-$here/../build}
[[ $# -gt 0 ]] && shift
[[ ${1:-} == -- ]] && shift
build=$(cd "$build" && pwd)
IBD=$build/src/ibd/ibd BENCH=$build/bench/openib-bench
for b in "$IBD" "$BENCH"; do
  [[ -x $b ]] || { echo "run.sh: $b is not built (ninja -C $build)" >&2; exit 2; }
done

work=$(mktemp -d "${TMPDIR:-/tmp}/openib-bench-XXXXXX")
# shellcheck source=../scripts/ibd_pair.sh
source "$here/../scripts/ibd_pair.sh"
cleanup() {
  stop_daemons
  rm -rf "$work"
}
trap cleanup EXIT

pa=$(free_port)
pb=$pa
while ((pb == pa)); do pb=$(free_port); done
PID_A='' PID_B=''
start_ibd a 1 "$pa" "$pb" PID_A || exit 2
start_ibd b 2 "$pb" "$pa" PID_B || exit 2
echo "run.sh: ibd A (pid $PID_A) and ibd B (pid $PID_B), cable 127.0.0.1:$pa <-> 127.0.0.1:$pb"
echo "run.sh: $(uname -srm), $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
echo "run.sh: load average before the run: $(cut -d" " -f1-3 /proc/loadavg) (other processes share these CPUs)"

rc=0
timeout 900 "$BENCH" --socket-a "$work/a.sock" --socket-b "$work/b.sock" --ibd-pid "$PID_A" "$@" || rc=$?
if ((rc != 0)); then
  for n in a b; do echo "--- ibd $n log (tail):"; tail -20 "$work/$n.log"; done
fi
exit "$rc"
