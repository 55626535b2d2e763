#!/usr/bin/env bash
# Every layout users meet, in one invocation (docs/performance.md "All
# layouts in one run"): for each layout bench/run.sh brings up the daemons,
# runs openib-bench with one client thread and with two client processes
# (--clients both) next to its baselines (TCP loopback, page-aligned
# memcpy, a shared-memory ping-pong between two processes), and stops
# everything; then one table: layout x clients x {8 B half RTT, 64 KiB
# WRITE} with the ratios to TCP (and the switch's to the direct UDP cable)
# and PASS/MISS per target of issue 14.
#
#   bash bench/all.sh [BUILD_DIR] [--full] [--keep DIR] [-- more openib-bench options]
#
# Layouts, in this order:
#   one-shm   one simhca serving both devices, shared-memory cable (run.sh's default)
#   each-shm  two ibds, each with its embedded simhca, shared-memory cable
#   each-udp  the same on a UDP cable over 127.0.0.1
#   switch    the same, each cabled over UDP to one switch of ibfabric, LIDs by OpenSM;
#             beside it a direct UDP cable pair, the bench's reference
#             (run.sh --udp-ref), measured interleaved in the same run
# Quick by default (openib-bench --quick: a few minutes in all); --full
# runs the bench's full iteration counts. --keep DIR keeps each layout's
# bench output (DIR/LAYOUT.out). Exit status: 0 when every layout ran
# (whatever the verdicts), 1 otherwise.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=$here/../build
[[ $# -gt 0 && $1 != --* ]] && { build=$1; shift; }
quick=(--quick)
keep=''
while [[ $# -gt 0 && $1 != -- ]]; do
  case $1 in
    --full) quick=() ;;
    --keep) [[ $# -ge 2 ]] || { echo "all.sh: --keep needs a directory" >&2; exit 2; }; keep=$2; shift ;;
    *) echo "all.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
[[ ${1:-} == -- ]] && shift
out=$(mktemp -d "${TMPDIR:-/tmp}/openib-all-XXXXXX")
trap 'rm -rf "$out"' EXIT

layouts=(one-shm each-shm each-udp switch)
declare -A flags=(
  [one-shm]="--simhca one --cable shm"
  [each-shm]="--simhca each --cable shm"
  [each-udp]="--simhca each --cable udp"
  [switch]="--cable switch --udp-ref"
)
declare -A load ok
t0=$SECONDS
for l in "${layouts[@]}"; do
  load[$l]=$(cut -d" " -f1-3 /proc/loadavg)
  echo "=== $l: bash bench/run.sh ${flags[$l]} -- ${quick[*]} --skip-many-qps --clients both $* (load average ${load[$l]})"
  # shellcheck disable=SC2086 # flags are words
  if bash "$here/run.sh" "$build" ${flags[$l]} -- "${quick[@]}" --skip-many-qps --clients both "$@" 2>&1 |
    tee "$out/$l.out"; then
    ok[$l]=1
  else
    ok[$l]=0
  fi
done
[[ -n $keep ]] && { mkdir -p "$keep"; cp "$out"/*.out "$keep"/; }

# get LAYOUT LABEL: the figure openib-bench printed after LABEL (its lines
# are "%-44s %12.2f ..."), empty if none.
get() {
  awk -v l="$2" '{ k = substr($0, 1, 44); sub(/ +$/, "", k)
                   if (k == l) { split(substr($0, 45), f, " "); print f[1]; exit } }' "$out/$1.out"
}
# calc EXPR: awk arithmetic on the figures; "-" when one is missing.
calc() { awk "BEGIN { printf \"%s\", $1 }" 2>/dev/null || echo -; }
ratio() { [[ -n $1 && -n $2 ]] && calc "sprintf(\"%.2f\", $1 / $2)" || echo -; }
# verdict A OP B: PASS when A OP B holds, MISS when not, "-" without figures.
verdict() { [[ -n $1 && -n $3 ]] || { echo -; return; }; calc "($1 $2 $3) ? \"PASS\" : \"MISS\""; }

suffix() { [[ $1 == thread ]] && echo "" || echo ", 2 processes"; }
lat() { get "$1" "openib RC SEND 8 B half RTT$(suffix "$2")"; }
bw() { get "$1" "openib RC WRITE 64 KiB$(suffix "$2")"; }
tcp_lat() { get "$1" "TCP loopback 8 B half RTT (NODELAY)"; }
tcp_bw() { get "$1" "TCP loopback 64 KiB stream"; }

echo
echo "=== all layouts ($((SECONDS - t0)) s, $(nproc) CPUs; ratios to TCP loopback measured in the same bench run)"
printf '%-9s %-7s %10s %6s %11s %6s %8s %8s  %s\n' layout clients "8B us" "xTCP" "64KiB MB/s" "xTCP" "lat/UDP" "bw/UDP" "targets (issue 14)"
for l in "${layouts[@]}"; do
  if [[ ${ok[$l]} != 1 ]]; then
    printf '%-9s %-7s %s\n' "$l" - "did not run (its output above)"
    continue
  fi
  for c in thread procs; do
    L=$(lat "$l" $c) B=$(bw "$l" $c) TL=$(tcp_lat "$l") TB=$(tcp_bw "$l")
    lu='-' bu='-' t=''
    case $l-$c in
      one-shm-thread)
        t="lat<=0.5xTCP $(verdict "$L" '<=' "0.5 * $TL"), bw>=1.5xTCP $(verdict "$B" '>=' "1.5 * $TB"), WRITE/memcpy $(ratio "$B" "$(get "$l" "memcpy 64 KiB, page-aligned buffers")") (two-copy limit 0.5)" ;;
      each-shm-procs)
        t="lat<=0.5xTCP $(verdict "$L" '<=' "0.5 * $TL")" ;;
      each-udp-*)
        t="lat<=1.0xTCP $(verdict "$L" '<=' "$TL"), bw>=1.0xTCP $(verdict "$B" '>=' "$TB")" ;;
      switch-*)
        # Against the reference pair (a direct UDP cable) of the same run,
        # with the same kind of clients.
        UL=$(get "$l" "reference RC SEND 8 B half RTT$(suffix $c)") UB=$(get "$l" "reference RC WRITE 64 KiB$(suffix $c)")
        if [[ -n $UL ]]; then
          lu=$(ratio "$L" "$UL") bu=$(ratio "$B" "$UB")
          t="lat<=1.5xUDP $(verdict "$L" '<=' "1.5 * $UL"), bw>=0.7xUDP $(verdict "$B" '>=' "0.7 * $UB")"
        fi ;;
    esac
    printf '%-9s %-7s %10s %6s %11s %6s %8s %8s  %s\n' "$l" $c "${L:--}" "$(ratio "$L" "$TL")" "${B:--}" \
      "$(ratio "$B" "$TB")" "$lu" "$bu" "$t"
  done
done
echo "(switch lat/UDP, bw/UDP: against a direct UDP pair measured in the same run, with the same kind of clients)"
echo
echo "baselines in each layout's run (load average at its start):"
printf '%-9s %10s %11s %12s %13s %14s  %s\n' layout "TCP 8B us" "TCP MB/s" "memcpy MB/s" "shm spin us" "shm futex us" "load"
for l in "${layouts[@]}"; do
  [[ ${ok[$l]} == 1 ]] || continue
  printf '%-9s %10s %11s %12s %13s %14s  %s\n' "$l" "$(tcp_lat "$l")" "$(tcp_bw "$l")" \
    "$(get "$l" "memcpy 64 KiB, page-aligned buffers")" "$(get "$l" "shm ping-pong 2 processes, spin, half RTT")" \
    "$(get "$l" "shm ping-pong 2 processes, futex, half RTT")" "${load[$l]}"
done
for l in "${layouts[@]}"; do [[ ${ok[$l]} == 1 ]] || exit 1; done
exit 0
