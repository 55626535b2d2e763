#!/usr/bin/env bash
# RoCEv2 ports against InfiniBand ports at the device level, same run
# (docs/performance.md "RoCEv2 ports (issue 32)"): openib-simhca-demo
# --bench N cables two simhca processes back to back over a UDP cable and
# drives both through the HCA driver from one thread: N round trips of an
# 8-byte RC SEND (half the round trip) and N RDMA WRITEs of 64 KiB, 16 in
# flight. Every round runs the InfiniBand ports (an IB UDP cable, IBA
# packets) and then the Ethernet ports (--roce: RoCEv2 frames on an
# Ethernet UDP cable), so the two see the same machine. Prints each run,
# then per metric the median (and range) of each and the ratio RoCE/IB
# (goal of issue 32: the RoCE figures within 1.2x of the IB cable's).
#
#   bash bench/roce.sh [BUILD] [--rounds N] [--iters N]
#
# BUILD defaults to ./build. No ratio is asserted: the figures are timed on
# a shared machine. Each run is bounded (timeout 300 s); the demo ends its
# simhca children by PID.
set -euo pipefail

build=build rounds=5 iters=2000
[[ $# -gt 0 && $1 != --* ]] && { build=$1; shift; }
while [[ $# -gt 0 ]]; do
  case $1 in
    --rounds) rounds=$2; shift 2 ;;
    --iters) iters=$2; shift 2 ;;
    *) echo "usage: roce.sh [BUILD] [--rounds N] [--iters N]" >&2; exit 2 ;;
  esac
done
demo=$build/src/tools/openib-simhca-demo
simhca=$build/src/sim/simhca/simhca
[[ -x $demo && -x $simhca ]] || { echo "roce.sh: build $build first (no $demo or $simhca)" >&2; exit 2; }

declare -A lat wr
for ((r = 1; r <= rounds; r++)); do
  for kind in ib roce; do
    flag=(); [[ $kind == roce ]] && flag=(--roce)
    out=$(timeout 300 "$demo" --simhca "$simhca" --bench "$iters" "${flag[@]}" 2>/dev/null |
          grep "^bench $kind:") || { echo "roce.sh: the $kind run of round $r failed" >&2; exit 1; }
    echo "round $r $out"
    lat[$kind]+="$(awk '{print $4}' <<<"$out") "
    wr[$kind]+="$(awk '{print $6}' <<<"$out") "
  done
done

median() { tr ' ' '\n' | grep . | sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
range() { tr ' ' '\n' | grep . | sort -g | awk 'NR == 1 {lo = $1} {hi = $1} END {printf "%s..%s", lo, hi}'; }
echo
echo "| metric ($rounds rounds x $iters) | IB cable median (range) | RoCEv2 median (range) | RoCE/IB |"
echo "| --- | --- | --- | --- |"
for m in lat wr; do
  declare -n arr=$m
  ib=$(median <<<"${arr[ib]}") roce=$(median <<<"${arr[roce]}")
  name=$([[ $m == lat ]] && echo "RC SEND 8 B half RTT (us)" || echo "RC WRITE 64 KiB (MB/s)")
  printf '| %s | %s (%s) | %s (%s) | %.3f |\n' "$name" "$ib" "$(range <<<"${arr[ib]}")" "$roce" \
    "$(range <<<"${arr[roce]}")" "$(awk -v a="$roce" -v b="$ib" 'BEGIN {print a / b}')"
done
