#!/usr/bin/env bash
# Before/after of two builds on the same machine in the same run
# (docs/performance.md "The seams, before and after (issue 30)"): the data
# path (bench/run.sh BUILD: TCP and memcpy baselines, the one-thread RC
# ping-pong and WRITE stream, 100 x 100 QPs created; about 7 s a run, 2 s
# with --quick, noisier) and the control path
# (bench/cm.sh: CM connections per second and per-connection memory;
# bench/cma.sh: RDMA CM connections per second and the time of each step),
# interleaved: every round runs each bench against BEFORE, then against
# AFTER. Prints every run's figures as they come, then, per metric, the
# median (and the range) of each side over the rounds and the ratio
# after/before, as a Markdown table.
#
#   bash bench/seams_ab.sh BEFORE_BUILD AFTER_BUILD [--rounds N] [--benches "data cm cma"]
#                          [--quick] [--cm-conns N] [--cma-conns N] [--keep-logs DIR]
#
# Each build is measured with the scripts (bench/run.sh, bench/cm.sh,
# bench/cma.sh, scripts/sandbox.sh, scripts/ibd_pair.sh) of the source tree
# it was configured from (its meson-info), so that a tree's scripts only
# ever start that tree's binaries with the options they know. bench/cm.sh
# runs from a copy that also passes --client-max-cm-ids 12000 to the ibds
# (its 10,000 connections held exceed the default of 1,024 CM ids per
# client, a limit newer than the script), unless it passes one itself. cm and cma
# need root (network namespaces); data does not. Each run is bounded
# (timeout, 600 s; the benches stop what they started by PID, also when
# stopped), and an interrupted run is stopped by its PID. The exit status is
# 1 when a run failed (its log's tail is printed, the other runs go on), 2
# on a usage error, 0 otherwise: no ratio is asserted, the figures are
# timed on a shared machine.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
usage() {
  echo "usage: seams_ab.sh BEFORE_BUILD AFTER_BUILD [--rounds N] [--benches \"data cm cma\"] [--quick] [--cm-conns N] [--cma-conns N] [--keep-logs DIR]" >&2
  exit 2
}
[[ $# -ge 2 && $1 != --* && $2 != --* ]] || usage
builds=("$1" "$2")
shift 2
rounds=3 benches="data cm cma" cm_conns='' cma_conns='' keep='' data_args=()
while [[ $# -gt 0 ]]; do
  [[ $1 == --quick ]] && { data_args=(-- --quick); shift; continue; }
  [[ $# -ge 2 ]] || { echo "seams_ab.sh: $1 needs a value" >&2; exit 2; }
  case $1 in
    --rounds) rounds=$2 ;;
    --benches) benches=$2 ;;
    --cm-conns) cm_conns=$2 ;;
    --cma-conns) cma_conns=$2 ;;
    --keep-logs) keep=$2 ;;
    *) echo "seams_ab.sh: unknown option $1" >&2; usage ;;
  esac
  shift 2
done
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "seams_ab.sh: --rounds takes a positive number" >&2; exit 2; }
for b in $benches; do
  [[ $b == data || $b == cm || $b == cma ]] || { echo "seams_ab.sh: no bench '$b' (data, cm, cma)" >&2; exit 2; }
done
if [[ " $benches " == *" cm "* || " $benches " == *" cma "* ]] && [[ $(id -u) != 0 ]]; then
  echo "seams_ab.sh: cm and cma run in network namespaces: run as root, or --benches data" >&2
  exit 2
fi

sides=(before after)
declare -a srcs=()
for i in 0 1; do
  [[ -d ${builds[i]} ]] || { echo "seams_ab.sh: ${builds[i]}: no such build directory" >&2; exit 2; }
  builds[i]=$(cd "${builds[i]}" && pwd)
  # The tree the build was configured from (meson-info), else this one.
  src=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["directories"]["source"])' \
    "${builds[i]}/meson-info/meson-info.json" 2>/dev/null || true)
  [[ -n $src && -f $src/bench/run.sh ]] || src=$(cd "$here/.." && pwd)
  srcs[i]=$src
  for x in src/ibd/ibd src/sim/simhca/simhca bench/openib-bench bench/tcp-conn-rate \
    examples/openib-cm-pingpong examples/openib-cmtime; do
    [[ -x ${builds[i]}/$x ]] || { echo "seams_ab.sh: ${builds[i]}/$x is not built" >&2; exit 2; }
  done
  echo "seams_ab.sh: ${sides[i]}: build ${builds[i]}, scripts of $src" \
    "($(git -C "$src" log -1 --format='%h %cs' 2>/dev/null || echo 'not a git tree'))"
done

work=$(mktemp -d "${TMPDIR:-/tmp}/openib-seams-ab-XXXXXX")
child=''
# shellcheck disable=SC2317 # run by the traps
cleanup() {
  if [[ -n $child ]]; then
    kill -TERM "$child" 2>/dev/null || true
    wait "$child" 2>/dev/null || true
  fi
  if [[ -n $keep ]]; then
    mkdir -p "$keep" && cp -r "$work"/. "$keep"/ && echo "seams_ab.sh: logs kept in $keep"
  fi
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# cm_script SIDE_INDEX: a copy of that tree's bench/cm.sh in the scratch
# directory, $work/cm-SIDE.sh, run as if from the tree (its bench= line),
# with the ibds' --client-max-cm-ids raised to hold its 10,000 connections.
cm_script() {
  local src=${srcs[$1]} out=$work/cm-${sides[$1]}.sh
  sed -e "s|^bench=.*|bench=$src/bench|" "$src/bench/cm.sh" >"$out"
  grep -q -- '--client-max-cm-ids' "$out" ||
    sed -i 's|--uid-max-qps 12000"|--uid-max-qps 12000 --client-max-cm-ids 12000"|' "$out"
  if ! grep -qx "bench=$src/bench" "$out" || ! grep -q -- '--client-max-cm-ids' "$out"; then
    echo "seams_ab.sh: $src/bench/cm.sh: cannot adapt it (its bench= line, OPENIB_SANDBOX_IBD_ARGS)" >&2
    exit 2
  fi
}
if [[ " $benches " == *" cm "* ]]; then cm_script 0; cm_script 1; fi

# parse BENCH SIDE ROUND LOG: the run's figures as TSV lines
# bench, metric, unit, better (higher|lower), side, round, value.
parse() {
  python3 - "$@" <<'PY'
import re, sys
bench, side, rnd, path = sys.argv[1:5]
text = open(path, errors="replace").read()
rows = []
def add(metric, unit, better, value):
    rows.append((bench, metric, unit, better, side, rnd, value))
num = r"([0-9]+(?:\.[0-9]+)?)"
if bench == "data":
    for label, unit, better in (
        ("TCP loopback 8 B half RTT (NODELAY)", "us", "lower"),
        ("openib RC SEND 8 B half RTT", "us", "lower"),
        ("TCP loopback 64 KiB stream", "MB/s", "higher"),
        ("openib RC WRITE 64 KiB", "MB/s", "higher"),
        ("memcpy 64 KiB, page-aligned buffers", "MB/s", "higher"),
        ("QP creation rate", "QPs/s", "higher"),
        ("ibd anonymous memory per QP", "KiB/QP", "lower"),
        ("simhca anonymous memory per QP", "KiB/QP", "lower"),
    ):
        m = re.search(r"^" + re.escape(label) + r"\s+" + num + r"\s", text, re.M)
        if m:
            add(label, unit, better, m.group(1))
elif bench == "cm":
    m = re.search(r"^\(a\) TCP loopback:.*the better one counts: " + num, text, re.M)
    if m: add("TCP loopback connect/accept/close", "conn/s", "higher", m.group(1))
    m = re.search(r"^\(b\) CM, .*= " + num + r" conn/s", text, re.M)
    if m: add("CM connections, 100 in flight", "conn/s", "higher", m.group(1))
    m = re.search(r"all 10000 open after " + num + " s", text)
    if m: add("10,000 CM connections open after", "s", "lower", m.group(1))
    m = re.search(r"CM memory per connection: active \(Hca1\) (-?\d+) B, passive \(Hca2\) (-?\d+) B", text)
    if m:
        add("CM memory per connection, active", "B", "lower", m.group(1))
        add("CM memory per connection, passive", "B", "lower", m.group(2))
    m = re.search(r"ibd RSS growth per connection.*: active (-?\d+) B, passive (-?\d+) B", text)
    if m:
        add("ibd RSS growth per connection, active", "B", "lower", m.group(1))
        add("ibd RSS growth per connection, passive", "B", "lower", m.group(2))
elif bench == "cma":
    m = re.search(r"^\(a\) TCP loopback:.*the better one counts: " + num, text, re.M)
    if m: add("TCP loopback connect/accept/close", "conn/s", "higher", m.group(1))
    for which in ("cold", "warm"):
        m = re.search(r"^\(b\) RDMA CM " + which + r".*connections, " + num + " conn/s", text, re.M)
        if m: add(f"RDMA CM {which}", "conn/s", "higher", m.group(1))
    warm = text.split("(b) RDMA CM warm", 1)
    if len(warm) == 2:
        for m in re.finditer(r"^\s+(\S(?:.*?\S)?)\s+total\s+" + num + r" ms\s+per connection\s+" + num + " us",
                             warm[1], re.M):
            add(f"RDMA CM warm: {m.group(1)}, per connection", "us", "lower", m.group(3))
for r in rows:
    print("\t".join(r))
PY
}

# run_one BENCH SIDE_INDEX ROUND: one run in the background (so that a
# signal reaches this script at once), its figures appended to results.tsv.
failed=0
run_one() {
  local bench=$1 i=$2 round=$3 build=${builds[$2]} src=${srcs[$2]} side=${sides[$2]}
  local log=$work/$bench-$side-$round.log rc=0 t0 cmd
  case $bench in
    data) cmd=(bash "$src/bench/run.sh" "$build" "${data_args[@]}") ;;
    cm) cmd=(bash "$work/cm-$side.sh" --build "$build") ; [[ -n $cm_conns ]] && cmd+=(--conns "$cm_conns") ;;
    cma) cmd=(bash "$src/bench/cma.sh" --build "$build") ; [[ -n $cma_conns ]] && cmd+=(--conns "$cma_conns") ;;
  esac
  t0=$SECONDS
  timeout -k 30 600 "${cmd[@]}" >"$log" 2>&1 &
  child=$!
  wait "$child" || rc=$?
  child=''
  if ((rc != 0)); then
    echo "seams_ab.sh: round $round, $bench on $side: FAILED (exit $rc after $((SECONDS - t0)) s); the log's tail:"
    tail -25 "$log" | sed 's/^/    /'
    failed=1
    return 0
  fi
  local rows
  rows=$(parse "$bench" "$side" "$round" "$log")
  if [[ -z $rows ]]; then
    echo "seams_ab.sh: round $round, $bench on $side: no figures in its output; the log's tail:"
    tail -25 "$log" | sed 's/^/    /'
    failed=1
    return 0
  fi
  printf '%s\n' "$rows" >>"$work/results.tsv"
  echo "round $round, $bench, $side ($((SECONDS - t0)) s): $(awk -F'\t' '{printf "%s%s %s %s", (NR > 1 ? "; " : ""), $2, $7, $3}' <<<"$rows")"
}

echo "seams_ab.sh: $rounds round(s) of: $benches; $(nproc) CPUs; load average at the start: $(cut -d' ' -f1-3 /proc/loadavg)"
: >"$work/results.tsv"
for ((r = 1; r <= rounds; ++r)); do
  for bench in $benches; do
    run_one "$bench" 0 "$r"
    run_one "$bench" 1 "$r"
  done
done
echo "seams_ab.sh: load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"

python3 - "$work/results.tsv" "$rounds" <<'PY'
import statistics, sys
path, rounds = sys.argv[1], sys.argv[2]
order, vals = [], {}
for line in open(path):
    bench, metric, unit, better, side, rnd, value = line.rstrip("\n").split("\t")
    key = (bench, metric, unit, better)
    if key not in vals:
        order.append(key)
        vals[key] = {"before": [], "after": []}
    vals[key][side].append(float(value))
def fmt(v):
    if v == int(v) and abs(v) < 1000:
        return str(int(v))
    return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.3g}" if abs(v) < 10 else f"{v:.1f}"
def cell(xs):
    if not xs:
        return "-"
    med = statistics.median(xs)
    return f"{fmt(med)} ({fmt(min(xs))} to {fmt(max(xs))})" if len(xs) > 1 else fmt(med)
print()
print(f"medians over the rounds ({rounds} asked; n = runs that gave the figure), (min to max):")
print()
print("| bench | metric | unit | better | n | before | after | after/before |")
print("| --- | --- | --- | --- | --- | --- | --- | --- |")
for key in order:
    bench, metric, unit, better = key
    b, a = vals[key]["before"], vals[key]["after"]
    ratio = "-"
    if a and b and statistics.median(b) != 0:
        ratio = f"{statistics.median(a) / statistics.median(b):.3f}"
    print(f"| {bench} | {metric} | {unit} | {better} | {len(b)}/{len(a)} | {cell(b)} | {cell(a)} | {ratio} |")
PY
exit "$failed"
