#!/usr/bin/env bash
# Where a ping-pong between two client processes spends its time
# (docs/performance.md "Separate processes"): two ibd daemons with their
# embedded simhcas (`--simhca each`) on one cable, openib-rc-pingpong
# between a server on ibd A and a client on ibd B, every process counted
# by `perf stat` (context switches, migrations, CPU time, and the system
# calls of the wait policies: sched_yield, futex, futex_waitv; on the UDP
# cable also poll, recvmmsg, sendmmsg) and, with --sched, the scheduler's
# view of the same run (`perf sched latency`: how long each task waited
# for a CPU after its wake-up). Prints the counts per ping-pong iteration.
#
#   bash bench/sep_proc_profile.sh [BUILD_DIR] [--cable shm|udp] [--iters N] [--size N]
#                                  [--poll-yield N] [--contended-us N] [--sched]
#
# Needs perf (Debian: linux-perf) and the right to trace (root, or
# kernel.perf_event_paranoid <= 1). Everything started here is stopped by
# PID on exit.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=$here/../build
if [[ $# -gt 0 && $1 != --* ]]; then build=$1; shift; fi
cable=shm iters=20000 size=8 yield=64 cont='' sched=0
while [[ $# -gt 0 ]]; do
  if [[ $1 == --sched ]]; then sched=1; shift; continue; fi
  [[ $# -ge 2 ]] || { echo "sep_proc_profile.sh: $1 needs a value" >&2; exit 2; }
  case $1 in
    --cable) cable=$2 ;;
    --iters) iters=$2 ;;
    --size) size=$2 ;;
    --poll-yield) yield=$2 ;;
    --contended-us) cont=$2 ;;
    *) echo "sep_proc_profile.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift 2
done
[[ $cable == shm || $cable == udp ]] || { echo "sep_proc_profile.sh: --cable shm or udp" >&2; exit 2; }
command -v perf >/dev/null || { echo "sep_proc_profile.sh: perf is not installed (apt-get install linux-perf)" >&2; exit 2; }
build=$(cd "$build" && pwd)
IBD=$build/src/ibd/ibd PP=$build/examples/openib-rc-pingpong
for b in "$IBD" "$PP"; do
  [[ -x $b ]] || { echo "sep_proc_profile.sh: $b is not built (ninja -C $build)" >&2; exit 2; }
done

work=$(mktemp -d "${TMPDIR:-/tmp}/openib-sep-prof-XXXXXX")
# shellcheck source=../scripts/ibd_pair.sh
source "$here/../scripts/ibd_pair.sh"
declare -a jobs_=()
cleanup() {
  local p
  for p in "${jobs_[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${jobs_[@]}"; do wait "$p" 2>/dev/null || true; done
  stop_daemons
  rm -rf "$work"
}
trap cleanup EXIT

ea='' eb=''
cable_pair "$cable" ea eb || exit 2
sargs=()
[[ -n $cont ]] && sargs=(--simhca-arg=--contended-us "--simhca-arg=$cont")
start_ibd_cable a 1 "$ea" PID_A "${sargs[@]}" || exit 2
start_ibd_cable b 2 "$eb" PID_B "${sargs[@]}" || exit 2
# The embedded simhcas: each ibd's child.
sim_of() { cat /proc/"$1"/task/*/children 2>/dev/null | tr ' ' '\n' | grep -m1 . || true; }
SIM_A=$(sim_of "$PID_A") SIM_B=$(sim_of "$PID_B")
[[ -n $SIM_A && -n $SIM_B ]] || { echo "sep_proc_profile.sh: no embedded simhca found" >&2; exit 2; }

events=context-switches,cpu-migrations,task-clock,syscalls:sys_enter_sched_yield,syscalls:sys_enter_futex,syscalls:sys_enter_futex_waitv
[[ $cable == udp ]] && events+=,syscalls:sys_enter_poll,syscalls:sys_enter_recvmmsg,syscalls:sys_enter_sendmmsg

echo "sep_proc_profile.sh: $(uname -srm), $(nproc) CPUs, $cable cable, $size B x $iters, --poll-yield $yield${cont:+, --contended-us $cont}"
echo "sep_proc_profile.sh: load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
perf stat --per-thread -x, -e "$events" -p "$PID_A,$PID_B,$SIM_A,$SIM_B" -o "$work/daemons.stat" &
jobs_+=($!)
statpid=$!
if ((sched)); then
  perf sched record -o "$work/sched.data" -- sleep 3600 >/dev/null 2>&1 &
  jobs_+=($!)
  schedpid=$!
fi
sleep 0.5
port=$(free_port)
perf stat -x, -e "$events" -o "$work/server.stat" -- \
  "$PP" --socket "$work/a.sock" -p "$port" -s "$size" -n "$iters" --poll-yield "$yield" >"$work/server.out" 2>&1 &
jobs_+=($!)
spid=$!
wait_listen "$port"
perf stat -x, -e "$events" -o "$work/client.stat" -- \
  timeout 600 "$PP" --socket "$work/b.sock" -p "$port" -s "$size" -n "$iters" --poll-yield "$yield" 127.0.0.1 \
  >"$work/client.out" 2>&1 || { cat "$work/client.out" "$work/server.out" >&2; exit 1; }
wait "$spid" || true
kill -INT "$statpid" 2>/dev/null || true
wait "$statpid" 2>/dev/null || true
if ((sched)); then
  # perf sched record ends its workload (sleep) on SIGINT and writes its file.
  for c in $(cat /proc/"$schedpid"/task/*/children 2>/dev/null); do kill -INT "$c" 2>/dev/null || true; done
  wait "$schedpid" 2>/dev/null || true
fi
echo "sep_proc_profile.sh: load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
grep usec/iter "$work/client.out"

# Counts per iteration, per process (threads of a daemon summed).
declare -A who=(["$PID_A"]="ibd A" ["$PID_B"]="ibd B" ["$SIM_A"]="simhca A" ["$SIM_B"]="simhca B")
{
  # --per-thread lines: COMM-TID,value,unit,event,...; map each TID to its process.
  while IFS=, read -r thr val _unit ev _rest; do
    [[ $thr == *-* && -n $val ]] || continue
    tid=${thr##*-}
    pid=$(awk '/^Tgid:/ {print $2}' /proc/"$tid"/status 2>/dev/null || true)
    name=${who[$pid]:-}
    if [[ -z $name ]]; then  # the thread is gone: its comm says which kind
      name=${thr%-*}
    fi
    echo "$name,$val,$ev"
  done <"$work/daemons.stat"
  for s in server client; do
    while IFS=, read -r val _unit ev _rest; do
      [[ -n $val && $val != \#* && $ev == *[a-z]* ]] && echo "$s (pingpong),$val,$ev"
    done <"$work/$s.stat"
  done
} | awk -F, -v n="$iters" '
  $2 ~ /^[0-9.]+$/ { v[$1 "|" $3] += $2; procs[$1] = 1; evs[$3] = 1 }
  END {
    printf "%-22s", "per iteration"
    for (e in evs) { short = e; sub(/syscalls:sys_enter_/, "", short); printf " %14s", short }
    printf "\n"
    for (p in procs) {
      printf "%-22s", p
      for (e in evs) {
        x = v[p "|" e] / n
        if (e == "task-clock") printf " %11.2f us", x * 1000   # msec -> us
        else printf " %14.2f", x
      }
      printf "\n"
    }
  }'
if ((sched)); then
  echo
  echo "perf sched latency (the run's tasks): wait for a CPU after each wake-up"
  # Our daemons by PID (threads of a process are listed by their TID:
  # the main thread's is the PID); the clients by name.
  perf sched latency -p -i "$work/sched.data" --sort avg 2>/dev/null |
    grep -E "Task|(ibd|simhca):($PID_A|$PID_B|$SIM_A|$SIM_B) |openib-rc-pingp:" | cut -c1-100 | head -20 || true
fi
