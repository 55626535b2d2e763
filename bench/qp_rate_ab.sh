#!/usr/bin/env bash
# A/B of the QP creation rate (docs/performance.md "Command concurrency: QP
# creation rate"): builds a base revision (default 34cdb76, the last tree
# with synchronous firmware commands in ibd) in a temporary git worktree and
# the current tree, both with -Dbuildtype=debugoptimized, then runs phase
# (e) of openib-bench (--only qps: 100 client processes creating RC QPs on
# ibd A) against each build's ibd and simhca, alternately, several times,
# and prints each rate, the medians and their ratio (new / base).
#
#   bash bench/qp_rate_ab.sh [--base REV] [--runs N] [--procs N] [--qps-per-proc N] [--keep DIR]
#
# One openib-bench binary (the current tree's) drives both: the client
# protocol is the same, and only the daemon side differs. --keep DIR reuses
# (and keeps) the builds in DIR between runs of this script.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
base=34cdb76 runs=3 procs=100 per=100 keep=''
while [[ $# -gt 0 ]]; do
  [[ $# -ge 2 ]] || { echo "qp_rate_ab.sh: $1 needs a value" >&2; exit 2; }
  case $1 in
    --base) base=$2 ;;
    --runs) runs=$2 ;;
    --procs) procs=$2 ;;
    --qps-per-proc) per=$2 ;;
    --keep) keep=$2 ;;
    *) echo "qp_rate_ab.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift 2
done

work=${keep:-$(mktemp -d "${TMPDIR:-/tmp}/openib-qp-ab-XXXXXX")}
mkdir -p "$work"
cleanup() {
  if [[ -z $keep ]]; then
    git -C "$root" worktree remove --force "$work/base" 2>/dev/null || true
    rm -rf "$work"
  fi
}
trap cleanup EXIT

targets=(src/ibd/ibd src/sim/simhca/simhca)
if [[ ! -d $work/base ]]; then
  git -C "$root" worktree add --detach "$work/base" "$base" >/dev/null
fi
[[ -d $work/base/build ]] || meson setup "$work/base/build" "$work/base" -Dbuildtype=debugoptimized >/dev/null
[[ -d $work/new ]] || meson setup "$work/new" "$root" -Dbuildtype=debugoptimized >/dev/null
echo "qp_rate_ab.sh: building $base in $work/base/build and the current tree in $work/new"
ninja -C "$work/base/build" "${targets[@]}" >/dev/null
ninja -C "$work/new" "${targets[@]}" bench/openib-bench >/dev/null
bench=$work/new/bench/openib-bench

rate_of() {  # build dir -> QP/s of one run (0 if the run failed)
  local out
  out=$(OPENIB_BENCH=$bench bash "$here/run.sh" "$1" -- --only qps --procs "$procs" --qps-per-proc "$per" 2>&1) || true
  local line
  line=$(grep 'QP creation rate' <<<"$out" || true)
  if [[ -z $line ]]; then
    echo "qp_rate_ab.sh: run against $1 failed:" >&2
    tail -20 <<<"$out" >&2
    echo 0
    return
  fi
  grep -E 'QPs created|memory per QP' <<<"$out" | sed 's/^/    /' >&2
  awk '{for (i = 1; i <= NF; ++i) if ($i == "QPs/s") print $(i - 1)}' <<<"$line"
}

median() { sort -n | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }

old_rates=() new_rates=()
for ((i = 1; i <= runs; ++i)); do
  o=$(rate_of "$work/base/build")
  n=$(rate_of "$work/new")
  echo "run $i: base $o QP/s, new $n QP/s"
  old_rates+=("$o")
  new_rates+=("$n")
done
mo=$(printf '%s\n' "${old_rates[@]}" | median)
mn=$(printf '%s\n' "${new_rates[@]}" | median)
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) CPUs"
echo "median QP creation rate: base ($base) $mo QP/s, new $mn QP/s"
awk -v o="$mo" -v n="$mn" 'BEGIN {if (o > 0) printf "ratio new/base: %.2f\n", n / o; else print "ratio: base rate is 0"}'
