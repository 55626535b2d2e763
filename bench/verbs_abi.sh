#!/usr/bin/env bash
# Debian's unmodified perftest over our libibverbs.so.1 against the
# project's own openib-perf on libopenib, in the same layout, same
# message size, same iteration counts (docs/performance.md "Verbs ABI:
# perftest against openib-perf", issue 31): ib_write_bw -s 65536 against openib-perf -t write -m bw, and
# ib_send_lat -s 8 against openib-perf -t send -m lat, alternating which
# runs first round after round (the machine is noisy), then the medians
# and the ratios perftest/native against the targets (bandwidth >= 0.95 x,
# latency <= 1.05 x).
#
#   bash bench/verbs_abi.sh [BUILD_DIR] [--rounds N] [--layouts "shm udp switch"]
#                           [--bw-iters N] [--lat-iters N] [--keep DIR] [--callgrind]
#
# Layouts, each brought up by bench/run.sh (its daemons, stopped by PID):
#   shm     one simhca serving both devices, shared-memory cable (run.sh's default)
#   udp     two ibds, each with its embedded simhca, on a UDP cable over
#           127.0.0.1 (test/abi/verbs_utils.sh's layout)
#   switch  the same, each cabled over UDP to one switch of ibfabric, LIDs
#           and forwarding table from Debian's OpenSM
# Every pair: the server on ibd A, the client on ibd B (127.0.0.1 for the
# side channel), each in its own process. Both programs
# get the same work per message: 128 WRs in flight and every one signaled
# (perftest -t 128 -Q 1, openib-perf -w 128), the path MTU perftest takes
# from the port (4096; openib-perf's default is 1024), and 8-byte SENDs
# not inline (perftest inlines nothing on a device of a vendor it does not
# know, whatever -I says; openib-perf -I 0).
# Defaults: 5 rounds, 20,000 WRITEs and 20,000 round trips a run. --keep
# DIR keeps every run's output. --callgrind (with --keep) runs every client
# under valgrind's callgrind, its profile in DIR/LAYOUT-TEST-KIND-ROUND.cg
# (the instructions each library spends per call, whatever the load; the
# figures of such a run are valgrind's, not the libraries'). Exit status 0
# when every run gave its figure (whatever the verdicts), 1 otherwise.
#
# bench/run.sh calls this script back as its bench binary (OPENIB_BENCH),
# with --socket-a/--socket-b of the two ibds it started: that is the inner
# mode, which runs the rounds of one layout.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

# ---- inner mode: the rounds of one layout, against run.sh's two ibds ------------
if [[ ${1:-} == --socket-a ]]; then
  sa='' sb='' build='' out='' rounds=5 bw_iters=20000 lat_iters=20000 name=''
  vg=()
  while [[ $# -gt 0 ]]; do
    case $1 in
      --socket-a) sa=$2; shift ;;
      --socket-b) sb=$2; shift ;;
      --ibd-pid | --simhca-pid | --layout) shift ;;  # run.sh's, for openib-bench
      --build) build=$2; shift ;;
      --out) out=$2; shift ;;
      --name) name=$2; shift ;;
      --rounds) rounds=$2; shift ;;
      --bw-iters) bw_iters=$2; shift ;;
      --lat-iters) lat_iters=$2; shift ;;
      --callgrind) vg=(valgrind --tool=callgrind --dump-instr=no) ;;
      *) echo "verbs_abi.sh (inner): unknown option $1" >&2; exit 2 ;;
    esac
    shift
  done
  work=$(mktemp -d "${TMPDIR:-/tmp}/verbs-abi-XXXXXX")
  # shellcheck source=../scripts/ibd_pair.sh
  source "$here/../scripts/ibd_pair.sh"
  srv=''
  trap '[[ -n $srv ]] && kill "$srv" 2>/dev/null; rm -rf "$work"' EXIT
  perf=$build/examples/openib-perf
  abi_env=(env "LD_LIBRARY_PATH=$build/src/abi:$build/src/lib")
  # Same work per message on both sides (see the header).
  declare -A cmd=(
    [bw-perftest]="ib_write_bw -F -s 65536 -n $bw_iters -t 128 -Q 1"
    [bw-native]="$perf -t write -m bw -s 65536 -n $bw_iters -w 128 --mtu 4096"
    [lat-perftest]="ib_send_lat -F -s 8 -n $lat_iters"
    [lat-native]="$perf -t send -m lat -s 8 -n $lat_iters --mtu 4096 -I 0"
  )
  # pair KIND TEST ROUND: the server on ibd A, the client on ibd B; prints
  # the figure (bw: BW average MB/s; lat: t_typical and t_avg, µs) into
  # $out as "NAME TEST KIND ROUND FIGURE..." and the client's row.
  pair() {
    local kind=$1 test=$2 round=$3 port c=0 s=0 row log
    local -a prog
    read -r -a prog <<<"${cmd[$test-$kind]}"
    port=$(free_port)
    log=$work/$name-$test-$kind-$round
    local -a wrap=()
    ((${#vg[@]})) && wrap=("${vg[@]}" "--callgrind-out-file=$KEEP_DIR/$name-$test-$kind-$round.cg")
    if [[ $kind == perftest ]]; then
      OPENIB_SOCKET=$sa timeout 300 "${abi_env[@]}" "${prog[@]}" -p "$port" >"$log.srv" 2>&1 &
    else
      timeout 300 "${prog[@]}" --socket "$sa" -p "$port" >"$log.srv" 2>&1 &
    fi
    srv=$!
    wait_listen "$port" || { kill "$srv" 2>/dev/null; wait "$srv" 2>/dev/null; srv=''; return 1; }
    if [[ $kind == perftest ]]; then
      OPENIB_SOCKET=$sb timeout 300 "${abi_env[@]}" "${wrap[@]}" "${prog[@]}" -p "$port" 127.0.0.1 >"$log.cli" 2>&1 ||
        c=$?
    else
      timeout 300 "${wrap[@]}" "${prog[@]}" --socket "$sb" -p "$port" 127.0.0.1 >"$log.cli" 2>&1 || c=$?
    fi
    wait "$srv" || s=$?
    srv=''
    [[ -n ${KEEP_DIR:-} ]] && cp "$log.srv" "$log.cli" "$KEEP_DIR/"
    row=$(grep -E '^ *[0-9]+ +[0-9]+ ' "$log.cli" | tail -1 || true)
    if ((c != 0 || s != 0)) || [[ -z $row ]]; then
      echo "verbs_abi.sh: $name $test $kind round $round failed (client $c, server $s):" >&2
      tail -5 "$log.srv" "$log.cli" >&2
      return 1
    fi
    if [[ $test == bw ]]; then
      awk -v p="$name bw $kind $round" '{print p, $4}' <<<"$row" >>"$out"
    else
      awk -v p="$name lat $kind $round" '{print p, $5, $6}' <<<"$row" >>"$out"
    fi
    printf '  round %d %-3s %-8s %s\n' "$round" "$test" "$kind" "$(tr -s ' \t' ' ' <<<"$row")"
  }
  rc=0
  for ((r = 1; r <= rounds; r++)); do
    order=(perftest native)
    ((r % 2 == 0)) && order=(native perftest)
    for t in bw lat; do
      for k in "${order[@]}"; do pair "$k" "$t" "$r" || rc=1; done
    done
  done
  exit "$rc"
fi

# ---- outer mode: every layout through bench/run.sh, then the table --------------
build=$here/../build
[[ $# -gt 0 && $1 != --* ]] && { build=$1; shift; }
build=$(cd "$build" && pwd)
rounds=5 bw_iters=20000 lat_iters=20000 layouts='shm udp switch' keep='' cg=()
while [[ $# -gt 0 ]]; do
  [[ $1 == --callgrind ]] && { cg=(--callgrind); shift; continue; }
  [[ $# -ge 2 ]] || { echo "verbs_abi.sh: $1 needs a value" >&2; exit 2; }
  case $1 in
    --rounds) rounds=$2 ;;
    --layouts) layouts=$2 ;;
    --bw-iters) bw_iters=$2 ;;
    --lat-iters) lat_iters=$2 ;;
    --keep) keep=$2 ;;
    *) echo "verbs_abi.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift 2
done
for b in "$build/examples/openib-perf" "$build/src/abi/libibverbs.so.1" "$build/src/lib/libopenib.so.0"; do
  [[ -e $b ]] || { echo "verbs_abi.sh: $b is not built (ninja -C $build)" >&2; exit 2; }
done
for p in ib_write_bw ib_send_lat; do
  command -v "$p" >/dev/null || { echo "verbs_abi.sh: needs Debian's perftest ($p)" >&2; exit 2; }
done
out=$(mktemp "${TMPDIR:-/tmp}/verbs-abi-XXXXXX")
trap 'rm -f "$out"' EXIT
[[ -n $keep ]] && { mkdir -p "$keep"; keep=$(cd "$keep" && pwd); }
((${#cg[@]} == 0)) || [[ -n $keep ]] || { echo "verbs_abi.sh: --callgrind needs --keep DIR" >&2; exit 2; }
declare -A flags=([shm]="--simhca one --cable shm" [udp]="--simhca each --cable udp" [switch]="--cable switch")
declare -A load
ok=1 t0=$SECONDS
for l in $layouts; do
  [[ -n ${flags[$l]:-} ]] || { echo "verbs_abi.sh: no layout '$l' (shm, udp, switch)" >&2; exit 2; }
  load[$l]=$(cut -d" " -f1-3 /proc/loadavg)
  echo "=== $l: bash bench/run.sh ${flags[$l]}, $rounds rounds (load average ${load[$l]})"
  # shellcheck disable=SC2086 # flags are words
  KEEP_DIR=$keep OPENIB_BENCH=$here/verbs_abi.sh bash "$here/run.sh" "$build" ${flags[$l]} -- \
    --build "$build" --out "$out" --name "$l" --rounds "$rounds" --bw-iters "$bw_iters" --lat-iters "$lat_iters" "${cg[@]}" ||
    ok=0
done

# stats NAME TEST KIND FIELD: "median min max n" of FIELD (3 = the figure,
# 4 = lat's t_avg) over the rounds.
stats() {
  awk -v n="$1" -v t="$2" -v k="$3" -v f="$4" '$1 == n && $2 == t && $3 == k {print $(f + 4)}' "$out" | sort -g |
    awk '{v[NR] = $1} END { if (NR == 0) { print "- - - 0"; exit }
         m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; print m, v[1], v[NR], NR }'
}
# ratios NAME TEST FIELD: perftest/native of each round, in round order.
ratios() {
  awk -v n="$1" -v t="$2" -v f="$3" '$1 == n && $2 == t { x[$3, $4] = $(f + 4); if ($4 > m) m = $4 }
       END { for (i = 1; i <= m; i++) if ((("perftest", i) in x) && (("native", i) in x) && x["native", i] > 0)
               printf "%.2f ", x["perftest", i] / x["native", i] }' "$out"
}
echo
echo "=== perftest over libibverbs.so.1 (ours) against openib-perf on libopenib, $((SECONDS - t0)) s, $(nproc) CPUs"
echo "    ib_write_bw -F -s 65536 -n $bw_iters -t 128 -Q 1  vs  openib-perf -t write -m bw -s 65536 -n $bw_iters -w 128 --mtu 4096"
echo "    ib_send_lat -F -s 8 -n $lat_iters                vs  openib-perf -t send -m lat -s 8 -n $lat_iters --mtu 4096 -I 0"
printf '%-7s %-22s %24s %24s %6s %6s  %-22s %s\n' layout figure "perftest: median (range)" "native: median (range)" \
  ratio paired "ratio per round" "target (ratio)"
for l in $layouts; do
  for spec in "bw 1 64KiB-WRITE-MB/s >= 0.95" "lat 1 8B-SEND-t_typical-us <= 1.05" "lat 2 8B-SEND-t_avg-us <= 1.05"; do
    read -r t f label op goal <<<"$spec"
    read -r pm plo phi pn <<<"$(stats "$l" "$t" perftest "$f")"
    read -r nm nlo nhi nn <<<"$(stats "$l" "$t" native "$f")"
    ratio=- verdict=-
    if ((pn > 0 && nn > 0)); then
      ratio=$(awk -v a="$pm" -v b="$nm" 'BEGIN { printf "%.3f", a / b }')
      verdict=$(awk -v r="$ratio" -v g="$goal" -v o="$op" \
        'BEGIN { p = o == ">=" ? r >= g : r <= g; printf "%s %s %s", o, g, p ? "PASS" : "MISS" }')
    fi
    per=$(ratios "$l" "$t" "$f")
    paired=$(tr ' ' '\n' <<<"$per" | grep . | sort -g | awk '{v[NR] = $1} END { if (NR == 0) print "-";
      else printf "%.2f", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }')
    printf '%-7s %-22s %24s %24s %6s %6s  %-22s %s\n' "$l" "$label" "$pm ($plo-$phi)" "$nm ($nlo-$nhi)" "$ratio" \
      "$paired" "$per" "$verdict"
  done
done
echo "(ratio: perftest's median / openib-perf's; paired: the median of the rounds' ratios; MB/s: MB = 2^20"
echo " bytes, as both print; latency: half a round trip; load average at each layout's start:"
for l in $layouts; do echo "  $l: ${load[$l]}"; done
echo ")"
((ok)) || { echo "verbs_abi.sh: some runs failed (above)"; exit 1; }
exit 0
