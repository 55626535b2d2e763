#!/usr/bin/env bash
# Runs openib-bench (docs/performance.md): starts two ibd daemons, each with
# its embedded simhca, cabled back to back (LIDs 1 and 2) over a
# shared-memory cable (default) or over UDP on 127.0.0.1, runs the bench
# against them, stops them by PID.
#
#   bash bench/run.sh [BUILD_DIR] [--cable shm|udp] [--ibd-arg ARG]... [-- openib-bench options, e.g. --quick]
#
# --ibd-arg passes ARG to both daemons (repeat it), e.g. the embedded
# simhca's device-loop spin window: --ibd-arg --simhca-arg=--spin-us --ibd-arg --simhca-arg=50
#
# BUILD_DIR defaults to build/ (as scripts/ use). Exit status: the bench's.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=${1:-$here/../build}
[[ $# -gt 0 ]] && shift
cable=shm
ibd_args=()
while [[ ${1:-} == --cable || ${1:-} == --ibd-arg ]]; do
  [[ $# -ge 2 ]] || { echo "run.sh: $1 needs a value" >&2; exit 2; }
  if [[ $1 == --cable ]]; then cable=$2; else ibd_args+=("$2"); fi
  shift 2
done
[[ $cable == shm || $cable == udp ]] || { echo "run.sh: --cable shm or udp, not '$cable'" >&2; exit 2; }
[[ ${1:-} == -- ]] && shift
build=$(cd "$build" && pwd)
IBD=$build/src/ibd/ibd BENCH=$build/bench/openib-bench
for b in "$IBD" "$BENCH"; do
  [[ -x $b ]] || { echo "run.sh: $b is not built (ninja -C $build)" >&2; exit 2; }
done

work=$(mktemp -d "${TMPDIR:-/tmp}/openib-bench-XXXXXX")
# shellcheck source=../scripts/ibd_pair.sh
source "$here/../scripts/ibd_pair.sh"
shm_file=''
cleanup() {
  stop_daemons
  [[ -n $shm_file ]] && rm -f "$shm_file"
  rm -rf "$work"
}
trap cleanup EXIT

PID_A='' PID_B=''
if [[ $cable == shm ]]; then
  shm_file=$(shm_cable_file)
  start_ibd_cable a 1 "SHM=$shm_file,END=A" PID_A "${ibd_args[@]}" || exit 2
  start_ibd_cable b 2 "SHM=$shm_file,END=B" PID_B "${ibd_args[@]}" || exit 2
  echo "run.sh: ibd A (pid $PID_A) and ibd B (pid $PID_B), shared-memory cable $shm_file"
else
  pa=$(free_port)
  pb=$pa
  while ((pb == pa)); do pb=$(free_port); done
  start_ibd a 1 "$pa" "$pb" PID_A "${ibd_args[@]}" || exit 2
  start_ibd b 2 "$pb" "$pa" PID_B "${ibd_args[@]}" || exit 2
  echo "run.sh: ibd A (pid $PID_A) and ibd B (pid $PID_B), UDP cable 127.0.0.1:$pa <-> 127.0.0.1:$pb"
fi
echo "run.sh: $(uname -srm), $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
echo "run.sh: load average before the run: $(cut -d" " -f1-3 /proc/loadavg) (other processes share these CPUs)"

rc=0
timeout 900 "$BENCH" --socket-a "$work/a.sock" --socket-b "$work/b.sock" --ibd-pid "$PID_A" "$@" || rc=$?
if ((rc != 0)); then
  for n in a b; do echo "--- ibd $n log (tail):"; tail -20 "$work/$n.log"; done
fi
exit "$rc"
