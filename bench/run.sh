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
declare -a daemons=()
cleanup() {
  local p
  for p in "${daemons[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${daemons[@]}"; do
    for _ in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
  done
  rm -rf "$work"
}
trap cleanup EXIT

used_ports() {
  local f _sl local_addr _rest
  for f in /proc/net/udp /proc/net/udp6; do
    [[ -r $f ]] || continue
    while read -r _sl local_addr _rest; do
      [[ $local_addr == *:* ]] && echo $((16#${local_addr##*:}))
    done < <(tail -n +2 "$f")
  done
}
free_port() {
  local used p
  used=" $(used_ports | tr '\n' ' ') "
  for _ in $(seq 200); do
    p=$((30000 + RANDOM % 30000))
    [[ $used == *" $p "* ]] || { echo "$p"; return; }
  done
  return 1
}

# start_ibd NAME LID LOCALPORT PEERPORT VAR
start_ibd() {
  local name=$1 lid=$2 lp=$3 pp=$4 var=$5
  mkdir -p "$work/$name.run"
  "$IBD" --socket "$work/$name.sock" --lid "$lid" --log warn --run-dir "$work/$name.run" \
    --cable "LOCAL=127.0.0.1:$lp,PEER=127.0.0.1:$pp" >"$work/$name.log" 2>&1 </dev/null &
  local pid=$!
  daemons+=("$pid")
  for _ in $(seq 300); do
    if grep -q "ibd: ready on" "$work/$name.log" 2>/dev/null; then
      printf -v "$var" '%s' "$pid"
      return
    fi
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  echo "run.sh: ibd $name did not get ready:" >&2
  tail -20 "$work/$name.log" >&2
  exit 2
}

pa=$(free_port)
pb=$pa
while ((pb == pa)); do pb=$(free_port); done
PID_A='' PID_B=''
start_ibd a 1 "$pa" "$pb" PID_A
start_ibd b 2 "$pb" "$pa" PID_B
echo "run.sh: ibd A (pid $PID_A) and ibd B (pid $PID_B), cable 127.0.0.1:$pa <-> 127.0.0.1:$pb"
echo "run.sh: $(uname -srm), $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
echo "run.sh: load average before the run: $(cut -d" " -f1-3 /proc/loadavg) (other processes share these CPUs)"

rc=0
timeout 900 "$BENCH" --socket-a "$work/a.sock" --socket-b "$work/b.sock" --ibd-pid "$PID_A" "$@" || rc=$?
if ((rc != 0)); then
  for n in a b; do echo "--- ibd $n log (tail):"; tail -20 "$work/$n.log"; done
fi
exit "$rc"
