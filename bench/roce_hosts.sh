#!/usr/bin/env bash
# RoCEv2 between two host ibds against InfiniBand between two host ibds
# and TCP over loopback, in the same run (docs/performance.md "RoCEv2
# ports (issue 32)", "Host ibds"; issue 32 "Measured": the RoCE figures
# within 1.2 x of the IB UDP cable's).
#
#   bash bench/roce_hosts.sh [BUILD_DIR] [--rounds N] [--lat-iters N] [--bw-iters N]
#                            [--mtu 256|512|1024|2048|4096] [--eth-mtu BYTES] [--keep DIR] [--guest [ITERS]]
#
# Four ibd daemons on this host, each with its embedded simhca
# (scripts/ibd_pair.sh), no subnet manager:
#   ib    ibd IA (LID 1) and IB (LID 2), InfiniBand ports on a UDP cable
#         over 127.0.0.1 (IBA packets; test/abi/verbs_utils.sh's layout)
#   roce  ibd RA and RB, Ethernet ports (--link-layer ethernet, distinct
#         GUIDs so distinct MACs) on an Ethernet UDP cable over 127.0.0.1
#         (RoCEv2 frames; test/abi/roce_verbs.sh's layout)
#   tcp   Debian's qperf: a server on 127.0.0.1, the client's tcp_lat and
#         tcp_bw against it
# and Debian's unmodified perftest through our libibverbs.so.1
# (LD_LIBRARY_PATH=BUILD/src/abi:BUILD/src/lib, OPENIB_SOCKET per side; the
# server on the first ibd, the client on the second, side channel over
# 127.0.0.1; on the RoCE ports -x 0, GID index 0, the link-local GID):
#   lat   ib_send_lat -F -s 8 -n LAT_ITERS: t_typical and t_avg, half the
#         round trip (µs); qperf -m 8 tcp_lat (one way, so half the round
#         trip too)
#   bw    ib_write_bw -F -s 65536 -n BW_ITERS: BW average (MB/s, MB = 2^20
#         bytes as perftest prints); qperf -m 64K tcp_bw (bytes/s, printed
#         here in the same MB/s)
# Round after round (the machine is noisy), the three kinds in a rotating
# order. Every run prints its figure and the CPU its processes took (per
# cent of one CPU over the run's wall time): the two ibds and their simhca
# children from /proc/PID/stat, the perftest or qperf client and server
# from this shell's children's times. Then the median (range) of each
# figure and the ratios RoCE/IB (of the medians, and the median of the
# rounds' own ratios), RoCE/TCP and IB/TCP. The path MTU is the port's
# (InfiniBand 4096, Ethernet 1024 for a 1500-byte frame) unless --mtu N
# gives perftest -m N on both (perftest takes no more than the port's
# active MTU: --mtu 4096 leaves the Ethernet ports at 1024). --eth-mtu
# BYTES gives the RoCE ports' simhcas --eth-mtu BYTES, the IP MTU of their
# network (default 1500; 4192 and up, jumbo frames as on a 9000-byte
# network, make their active MTU 4096: docs/simhca.md §16.1). No ratio is
# asserted: the figures are timed on a shared machine.
#
# --guest [ITERS] then runs test/qemu/rxe_cm.sh (Linux's rxe under QEMU,
# TCG, against an ibd through the RDMA CM, Debian's rping both ways) with
# OPENIB_RXE_CM_ITERS=ITERS (default 2000) and prints rping's iterations
# per second each way, from the guest's uptime printed before each rping.
# --keep DIR keeps every run's output (and the guest's console log).
# Defaults: 5 rounds, 20,000 round trips and 20,000 WRITEs a run. Every
# process this script starts is stopped by its PID, also on failure.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=$here/../build
[[ $# -gt 0 && $1 != --* ]] && { build=$1; shift; }
build=$(cd "$build" && pwd)
rounds=5 lat_iters=20000 bw_iters=20000 mtu='' eth_mtu='' keep='' guest=0 guest_iters=2000
while [[ $# -gt 0 ]]; do
  case $1 in
    --rounds) rounds=$2; shift 2 ;;
    --lat-iters) lat_iters=$2; shift 2 ;;
    --bw-iters) bw_iters=$2; shift 2 ;;
    --mtu) mtu=$2; shift 2 ;;
    --eth-mtu) eth_mtu=$2; shift 2 ;;
    --keep) keep=$2; shift 2 ;;
    --guest)
      guest=1
      shift
      [[ ${1:-} =~ ^[0-9]+$ ]] && { guest_iters=$1; shift; }
      ;;
    *) echo "usage: roce_hosts.sh [BUILD_DIR] [--rounds N] [--lat-iters N] [--bw-iters N] [--mtu N] [--eth-mtu BYTES] [--keep DIR] [--guest [ITERS]]" >&2
       exit 2 ;;
  esac
done
IBD=$build/src/ibd/ibd
for b in "$IBD" "$build/src/sim/simhca/simhca" "$build/src/abi/libibverbs.so.1" "$build/src/lib/libopenib.so.0"; do
  [[ -e $b ]] || { echo "roce_hosts.sh: $b is not built (ninja -C $build)" >&2; exit 2; }
done
for p in ib_write_bw ib_send_lat qperf; do
  command -v "$p" >/dev/null || { echo "roce_hosts.sh: needs $p (Debian's perftest, qperf)" >&2; exit 2; }
done
[[ -n $keep ]] && { mkdir -p "$keep"; keep=$(cd "$keep" && pwd); }

work=$(mktemp -d "${TMPDIR:-/tmp}/roce-hosts-XXXXXX")
# shellcheck source=../scripts/ibd_pair.sh
source "$here/../scripts/ibd_pair.sh"
srv=''
cleanup() {
  [[ -n $srv ]] && { kill "$srv" 2>/dev/null || true; wait "$srv" 2>/dev/null || true; }
  stop_daemons
  rm -rf "$work"
}
trap cleanup EXIT

# ---- the guest ------------------------------------------------------------------------------
# guest_run: test/qemu/rxe_cm.sh with OPENIB_RXE_CM_ITERS=$guest_iters; prints
# rping's iterations per second each way; sets rc=1 if it failed.
guest_run() {
  local console=$work/guest-console.log grc=0
  echo
  echo "=== guest: test/qemu/rxe_cm.sh with OPENIB_RXE_CM_ITERS=$guest_iters (Linux's rxe under QEMU TCG, rping both ways)"
  OPENIB_QEMU_KEEP_LOG=$console OPENIB_RXE_CM_ITERS=$guest_iters timeout 1800 \
    bash "$here/../test/qemu/rxe_cm.sh" "$build" >"$work/guest.log" 2>&1 || grc=$?
  [[ -n $keep ]] && cp "$work/guest.log" "$console" "$keep/" 2>/dev/null
  if ((grc != 0)); then
    echo "roce_hosts.sh: the guest run failed ($grc):" >&2
    grep -E '^qemu-rxe-cm: ' "$work/guest.log" | tail -20 >&2
    rc=1
  fi
  [[ -s $console ]] || { echo "roce_hosts.sh: no console log from the guest" >&2; rc=1; return; }
  # "OPENIB: at Ts: rping -c ..." before the guest's client, "... rping -s"
  # before its server; the next "OPENIB: at Ts" or "OPENIB: done at Ts"
  # after that ends the server's (test/qemu/rxe_cm.sh). Each interval holds
  # rping's connection through the RDMA CM too; the server's, the host
  # client's 2 s start delay.
  awk -v n="$guest_iters" '
    function at() { return ($2 == "at" ? $3 : $4) + 0 }
    /^OPENIB: (at .*s: |done at )/ { if (s && !e) e = at() }
    /^OPENIB: at .*s: rping -c/ { c = at() }
    /^OPENIB: at .*s: rping -s/ { s = at() }
    END {
      if (!c || !s) { print "  no rping timestamps in the console log"; exit }
      printf "  guest -> host (guest rping -c, host rping -s): %d iterations in %.2f s: %.0f iterations/s, %.0f us each\n", n, s - c, n / (s - c), 1e6 * (s - c) / n
      if (e) printf "  host -> guest (host rping -c, guest rping -s): %d iterations in %.2f s, 2 s of it the host client'"'"'s start delay: %.0f iterations/s, %.0f us each\n", n, e - s, n / (e - s - 2), 1e6 * (e - s - 2) / n
    }' "$console"
  # perftest's figures where the test prints them (ib_write_bw -R, ib_send_lat -R)
  grep -E '^qemu-rxe-cm: ib_[a-z_]+ -R .*\): +[0-9]' "$work/guest.log" | sed 's/^/  /' || true
  grep -E '^\[?qemu-rxe-cm\]? ?(PASS|FAIL)' "$work/guest.log" | sed 's/^/  /' || true
}
rc=0
if ((rounds == 0)); then  # --rounds 0 --guest: the guest alone
  ((guest)) && guest_run
  exit "$rc"
fi

# ---- the daemons --------------------------------------------------------------------
eth=(--simhca-arg=--link-layer --simhca-arg=ethernet)
[[ -n $eth_mtu ]] && eth+=(--simhca-arg=--eth-mtu "--simhca-arg=$eth_mtu")
PID_IA='' PID_IB='' PID_RA='' PID_RB='' PID_QP=''
cable_pair udp ia_end ib_end || exit 2
start_ibd_cable ia 1 "$ia_end" PID_IA || exit 2
start_ibd_cable ib 2 "$ib_end" PID_IB || exit 2
cable_pair udp ra_end rb_end || exit 2
start_ibd_cable ra 1 "$ra_end" PID_RA "${eth[@]}" --simhca-arg=--guid --simhca-arg=0x0002c90300000e00 || exit 2
start_ibd_cable rb 2 "$rb_end" PID_RB "${eth[@]}" --simhca-arg=--guid --simhca-arg=0x0002c90300000f00 || exit 2
qport=$(free_port)
qperf -lp "$qport" >"$work/qperf-server.log" 2>&1 </dev/null &
PID_QP=$!
daemons+=("$PID_QP")
wait_listen "$qport" || exit 2

# The embedded simhca is the ibd's child process.
child_of() { cat "/proc/$1/task/$1/children" 2>/dev/null | awk '{print $1}'; }
declare -A procs=(
  [ib]="$PID_IA $(child_of "$PID_IA") $PID_IB $(child_of "$PID_IB")"
  [roce]="$PID_RA $(child_of "$PID_RA") $PID_RB $(child_of "$PID_RB")"
  [tcp]="$PID_QP"
)
echo "roce_hosts.sh: $(uname -srm), $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
echo "roce_hosts.sh: ib: ibd IA/IB (pids $PID_IA/$PID_IB, simhca $(child_of "$PID_IA")/$(child_of "$PID_IB")), UDP cable ${ia_end%%,*}"
echo "roce_hosts.sh: roce: ibd RA/RB (pids $PID_RA/$PID_RB, simhca $(child_of "$PID_RA")/$(child_of "$PID_RB")), Ethernet UDP cable ${ra_end%%,*}"
echo "roce_hosts.sh: tcp: qperf server pid $PID_QP on 127.0.0.1:$qport"
echo "roce_hosts.sh: load average before the rounds: $(cut -d' ' -f1-3 /proc/loadavg)"

# ---- one run --------------------------------------------------------------------------
hz=$(getconf CLK_TCK)
# PID...: the CPU time of each and of its reaped children (qperf's server
# forks one per test), in clock ticks.
cpu_ticks() {
  local p
  for p in "$@"; do awk '{print $14 + $15 + $16 + $17}' "/proc/$p/stat" 2>/dev/null || echo 0; done
}
# VAR: this shell's reaped children's user+sys seconds (times, run in this
# shell: a subshell's would count only its own children).
child_secs() {
  times >"$work/times"
  printf -v "$1" '%s' "$(tail -1 "$work/times" | awk '{ s = 0; for (i = 1; i <= 2; i++) { split($i, a, /[ms]/); s += a[1] * 60 + a[2] }
    printf "%.3f", s }')"
}
abi_env=(env "LD_LIBRARY_PATH=$build/src/abi:$build/src/lib")
mtu_opt=()
[[ -n $mtu ]] && mtu_opt=(-m "$mtu")
out=$work/figures  # KIND TEST ROUND FIGURE [T_AVG]
: >"$out"

# run KIND TEST ROUND: one measurement; appends to $out, prints a line.
run() {
  local kind=$1 test=$2 round=$3 c=0 s=0 row fig log=$work/$1-$2-$3 t0 t1 c0 c1
  local -a prog p0 p1 pids
  read -r -a pids <<<"${procs[$kind]}"
  mapfile -t p0 < <(cpu_ticks "${pids[@]}")
  child_secs c0
  t0=$EPOCHREALTIME
  if [[ $kind == tcp ]]; then
    local m=8 t=tcp_lat
    [[ $test == bw ]] && m=64K t=tcp_bw
    timeout 120 qperf -lp "$qport" -t 2 -uu 127.0.0.1 -m "$m" "$t" >"$log.cli" 2>&1 || c=$?
  else
    local sa=$work/ia.sock sb=$work/ib.sock gid=()
    [[ $kind == roce ]] && { sa=$work/ra.sock sb=$work/rb.sock gid=(-x 0); }
    if [[ $test == lat ]]; then prog=(ib_send_lat -F -s 8 -n "$lat_iters"); else prog=(ib_write_bw -F -s 65536 -n "$bw_iters"); fi
    prog+=("${gid[@]}" "${mtu_opt[@]}")
    local port
    port=$(free_port)
    OPENIB_SOCKET=$sa timeout 300 "${abi_env[@]}" "${prog[@]}" -p "$port" >"$log.srv" 2>&1 &
    srv=$!
    if wait_listen "$port"; then
      OPENIB_SOCKET=$sb timeout 300 "${abi_env[@]}" "${prog[@]}" -p "$port" 127.0.0.1 >"$log.cli" 2>&1 || c=$?
    else
      c=1
      kill "$srv" 2>/dev/null || true
    fi
    wait "$srv" || s=$?
    srv=''
  fi
  t1=$EPOCHREALTIME
  child_secs c1
  mapfile -t p1 < <(cpu_ticks "${pids[@]}")
  [[ -n $keep ]] && cp "$log".* "$keep/" 2>/dev/null
  if [[ $kind == tcp ]]; then
    if [[ $test == lat ]]; then
      fig=$(awk '$1 == "latency" {printf "%.2f", $3 / 1000}' "$log.cli")
    else
      fig=$(awk '$1 == "bw" {printf "%.1f", $3 / 1048576}' "$log.cli")
    fi
  else
    row=$(grep -E '^ *[0-9]+ +[0-9]+ ' "$log.cli" | tail -1 || true)
    if [[ $test == lat ]]; then fig=$(awk '{print $5, $6}' <<<"$row"); else fig=$(awk '{print $4}' <<<"$row"); fi
  fi
  if ((c != 0 || s != 0)) || [[ -z $fig ]]; then
    echo "roce_hosts.sh: $kind $test round $round failed (client $c, server $s):" >&2
    tail -n 5 "$log".* >&2
    return 1
  fi
  echo "$kind $test $round $fig" >>"$out"
  # CPU seconds over the run: the daemons (ibd, simhca, ibd, simhca; or
  # qperf's server) and the client + server just run (both busy-poll).
  local wall i cpu='' progs ops=$lat_iters
  [[ $test == bw ]] && ops=$bw_iters
  wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.2f", b - a}')
  for i in "${!pids[@]}"; do
    cpu+=$(awk -v d="$((p1[i] - p0[i]))" -v hz="$hz" 'BEGIN {printf "%.2f ", d / hz}')
  done
  progs=$(awk -v a="$c0" -v b="$c1" 'BEGIN {printf "%.2f", b - a}')
  local what="ibd A, simhca A, ibd B, simhca B" unit="t_typical t_avg us"
  [[ $kind == tcp ]] && what="qperf server"
  [[ $test == bw ]] && unit="MB/s"
  [[ $kind == tcp && $test == lat ]] && unit="us"
  printf '  round %d %-4s %-3s %-16s (%s) in %s s; CPU s: %s %s, clients %s\n' "$round" "$kind" "$test" "$fig" "$unit" \
    "$wall" "$what" "$cpu" "$progs"
  [[ $kind == tcp ]] && ops=0
  echo "$kind $test $round $ops $cpu $progs" >>"$out.cpu"
}

tstart=$SECONDS
kinds=(ib roce tcp)
echo "=== $rounds rounds: ib_send_lat -F -s 8 -n $lat_iters, ib_write_bw -F -s 65536 -n $bw_iters${mtu:+, -m $mtu}${eth_mtu:+, RoCE ports at IP MTU $eth_mtu}; qperf -m 8 tcp_lat, -m 64K tcp_bw (-t 2)"
for ((r = 1; r <= rounds; r++)); do
  order=("${kinds[@]:$(((r - 1) % 3))}" "${kinds[@]:0:$(((r - 1) % 3))}")
  for t in lat bw; do
    for k in "${order[@]}"; do run "$k" "$t" "$r" || rc=1; done
  done
done
load=$(cut -d' ' -f1-3 /proc/loadavg)

# ---- the table ---------------------------------------------------------------------------
# stats KIND TEST FIELD: "median min max" of FIELD (1 = the figure, 2 = t_avg).
stats() {
  awk -v k="$1" -v t="$2" -v f="$3" '$1 == k && $2 == t && NF >= 3 + f {print $(3 + f)}' "$out" | sort -g |
    awk '{v[NR] = $1} END { if (NR == 0) { print "- - -"; exit }
         printf "%.2f %s %s\n", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2, v[1], v[NR] }'
}
# paired A B TEST FIELD: the median of the rounds' ratios A/B.
paired() {
  awk -v a="$1" -v b="$2" -v t="$3" -v f="$4" '$2 == t { x[$1, $3] = $(3 + f); if ($3 > m) m = $3 }
       END { for (i = 1; i <= m; i++) if (((a, i) in x) && ((b, i) in x) && x[b, i] > 0) print x[a, i] / x[b, i] }' "$out" |
    sort -g | awk '{v[NR] = $1} END { if (NR == 0) print "-"; else printf "%.3f", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "-" || b == "-" || b == 0) print "-"; else printf "%.3f", a / b }'; }
echo
echo "=== median (range) over $rounds rounds, $((SECONDS - tstart)) s, load average at the end $load"
echo "| figure | IB cable | RoCEv2 | TCP loopback | RoCE/IB (paired) | RoCE/TCP | IB/TCP | goal RoCE/IB |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- |"
for spec in "lat 1 RC-SEND-8-B-half-RTT-t_typical-(us) 1 <=1.2" "lat 2 RC-SEND-8-B-half-RTT-t_avg-(us) 1 <=1.2" \
  "bw 1 RC-WRITE-64-KiB-(MB/s) 1 >=0.833"; do
  read -r t f label tf goal <<<"$spec"
  read -r im ilo ihi <<<"$(stats ib "$t" "$f")"
  read -r rm rlo rhi <<<"$(stats roce "$t" "$f")"
  read -r tm tlo thi <<<"$(stats tcp "$t" "$tf")"
  ri=$(ratio "$rm" "$im")
  verdict=$(awk -v r="$ri" -v g="$goal" 'BEGIN { if (r == "-") { print "-"; exit }
    op = substr(g, 1, 2); v = substr(g, 3) + 0; ok = op == "<=" ? r <= v : r >= v; printf "%s %s", g, ok ? "met" : "missed" }')
  printf '| %s | %s (%s..%s) | %s (%s..%s) | %s (%s..%s) | %s (%s) | %s | %s | %s |\n' "${label//-/ }" \
    "$im" "$ilo" "$ihi" "$rm" "$rlo" "$rhi" "$tm" "$tlo" "$thi" "$ri" "$(paired roce ib "$t" "$f")" \
    "$(ratio "$rm" "$tm")" "$(ratio "$im" "$tm")" "$verdict"
done
echo "(TCP latency: qperf tcp_lat, one way; its t_avg row repeats it. MB = 2^20 bytes.)"
echo
echo "=== CPU per operation, mean over the rounds (µs per round trip / per 64 KiB WRITE; the runs' set-up included)"
echo "    ibd A, simhca A, ibd B, simhca B, perftest client + server"
awk '$4 > 0 { k = $1 " " $2; n[k]++; for (i = 5; i <= NF; i++) s[k, i] += 1e6 * $i / $4; nf[k] = NF }
     END { for (k in n) { printf "  %-9s", k; for (i = 5; i <= nf[k]; i++) printf " %7.1f", s[k, i] / n[k]; printf "\n" } }' \
  "$out.cpu" | sort

if ((guest)); then
  stop_daemons  # (the host ibds would only take CPU from the guest)
  guest_run
fi
exit "$rc"
