#!/usr/bin/env bash
# Separate processes (docs/performance.md "Separate processes"): two ibd
# daemons, each with its embedded simhca (`--simhca each`), on a
# shared-memory cable and on a UDP cable, and openib-rc-pingpong between
# two client processes (server on ibd A, client on ibd B), under several
# spin policies in the same run, next to TCP loopback's 8-byte half round
# trip and to openib-bench's one-thread latency on the same daemons.
#
#   bash bench/sep_proc_ab.sh [BUILD_DIR] [--rounds N] [--iters N] [--size N]
#                             [--cables "shm udp"] [--variants "NAME:YIELD:CONTENDED ..."]
#
# A variant is NAME:YIELD:CONTENDED: the clients' --poll-yield (empty
# polls of the CQ before sched_yield, 0 = never; docs/library.md
# "Polling") and the simhcas' --contended-us (docs/simhca.md §13). The
# default variants:
#   old    0:50    the policies before issue 14 (clients spin, 50 us)
#   yield  64:50   the clients yield, the device loops as before
#   cont   0:200   the device loops' threshold alone
#   new    64:200  both (today's defaults)
# Each round runs every variant once per cable, in order, then TCP's
# baseline; the figures are the medians over the rounds. The last lines
# give, per cable and variant, the ping-pong's half round trip (us/iter / 2),
# its ratio to TCP loopback's (issue 14's target for shm: <= 0.5), to
# openib-bench's one-thread figure on the same daemons, and to `old`.
# Everything started here is stopped by PID on exit.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=$here/../build
if [[ $# -gt 0 && $1 != --* ]]; then build=$1; shift; fi
rounds=3 iters=10000 size=8 cables="shm udp"
variants="old:0:50 yield:64:50 cont:0:200 new:64:200"
while [[ $# -gt 0 ]]; do
  [[ $# -ge 2 ]] || { echo "sep_proc_ab.sh: $1 needs a value" >&2; exit 2; }
  case $1 in
    --rounds) rounds=$2 ;;
    --iters) iters=$2 ;;
    --size) size=$2 ;;
    --cables) cables=$2 ;;
    --variants) variants=$2 ;;
    *) echo "sep_proc_ab.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift 2
done
build=$(cd "$build" && pwd)
IBD=$build/src/ibd/ibd PP=$build/examples/openib-rc-pingpong BENCH=$build/bench/openib-bench
for b in "$IBD" "$PP" "$BENCH"; do
  [[ -x $b ]] || { echo "sep_proc_ab.sh: $b is not built (ninja -C $build)" >&2; exit 2; }
done

work=$(mktemp -d "${TMPDIR:-/tmp}/openib-sep-XXXXXX")
# shellcheck source=../scripts/ibd_pair.sh
source "$here/../scripts/ibd_pair.sh"
declare -a clients=()
cleanup() {
  local p
  for p in "${clients[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${clients[@]}"; do wait "$p" 2>/dev/null || true; done
  stop_daemons
  rm -rf "$work"
}
trap cleanup EXIT

# One pair of daemons per cable and --contended-us value, all started up
# front (idle, their device loops sleep).
declare -A pair=()
start_pair() {  # cable contended
  local cable=$1 cont=$2 key="$1-$2" ea='' eb=''
  [[ -n ${pair[$key]:-} ]] && return 0
  cable_pair "$cable" ea eb || exit 2
  local _pid
  start_ibd_cable "$key-a" 1 "$ea" _pid --simhca-arg=--contended-us "--simhca-arg=$cont" || exit 2
  start_ibd_cable "$key-b" 2 "$eb" _pid --simhca-arg=--contended-us "--simhca-arg=$cont" || exit 2
  pair[$key]=1
}
for c in $cables; do
  [[ $c == shm || $c == udp ]] || { echo "sep_proc_ab.sh: cables are shm and udp, not '$c'" >&2; exit 2; }
  for v in $variants; do
    IFS=: read -r _ _ cont <<<"$v"
    start_pair "$c" "$cont"
  done
done

# pingpong KEY YIELD: sets `us` to the us/iter of one run (0 if it failed).
# Not in a subshell: the server must stay this shell's child (cleanup).
pingpong() {
  local key=$1 y=$2 port spid out
  us=0
  port=$(free_port)
  timeout 300 "$PP" --socket "$work/$key-a.sock" -p "$port" -s "$size" -n "$iters" --poll-yield "$y" \
    >"$work/server.out" 2>&1 &
  spid=$!
  clients=("$spid")
  if wait_listen "$port"; then
    out=$(timeout 300 "$PP" --socket "$work/$key-b.sock" -p "$port" -s "$size" -n "$iters" --poll-yield "$y" \
      127.0.0.1 2>&1) || true
  else
    kill -TERM "$spid" 2>/dev/null || true
  fi
  wait "$spid" 2>/dev/null || true
  clients=()
  us=$(awk '/usec\/iter/ {print $(NF - 1)}' <<<"${out:-}")
  if [[ -z $us ]]; then
    echo "sep_proc_ab.sh: ping-pong on $key failed: ${out:-} $(cat "$work/server.out")" >&2
    us=0
  fi
}
# single KEY YIELD -> openib-bench's one-thread 8 B half RTT on the same daemons.
single() {
  OPENIB_POLL_YIELD=$2 timeout 300 "$BENCH" --socket-a "$work/$1-a.sock" --socket-b "$work/$1-b.sock" \
    --only latency --quick 2>/dev/null | awk '/half RTT/ {print $(NF - 1)}' || true
}
median() { sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }

echo "sep_proc_ab.sh: $(uname -srm), $(nproc) CPUs; $size B x $iters iterations, $rounds rounds"
echo "sep_proc_ab.sh: load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
declare -A pp=() st=()
tcp=()
for ((r = 1; r <= rounds; ++r)); do
  for c in $cables; do
    for v in $variants; do
      IFS=: read -r name y cont <<<"$v"
      pingpong "$c-$cont" "$y"
      u=$us
      s=$(single "$c-$cont" "$y")
      pp[$c/$name]+="$u "
      st[$c/$name]+="${s:-0} "
      printf 'round %d %-4s %-6s ping-pong %9s us/iter   one thread %7s us half RTT\n' "$r" "$c" "$name" "$u" "${s:-?}"
    done
  done
  t=$(timeout 120 "$BENCH" --baselines-only --quick | awk '/TCP loopback 8 B/ {print $(NF - 1)}')
  tcp+=("${t:-0}")
  echo "round $r TCP loopback 8 B half RTT $t us"
done
echo "sep_proc_ab.sh: load average after: $(cut -d' ' -f1-3 /proc/loadavg)"

tm=$(printf '%s\n' "${tcp[@]}" | median)
echo
echo "TCP loopback 8 B half RTT (median of $rounds): $tm us"
printf '%-4s %-6s %10s %10s %9s %11s %9s %8s\n' cable policy us/iter half-RTT "/TCP" one-thread "/1thread" "/old"
for c in $cables; do
  old=''
  for v in $variants; do
    IFS=: read -r name _ _ <<<"$v"
    m=$(printf '%s\n' ${pp[$c/$name]} | median)
    s=$(printf '%s\n' ${st[$c/$name]} | median)
    [[ -z $old ]] && old=$m
    awk -v c="$c" -v n="$name" -v m="$m" -v s="$s" -v t="$tm" -v o="$old" 'BEGIN {
      h = m / 2
      printf "%-4s %-6s %10.1f %10.2f %9.2f %11.2f %9.1f %8.2f\n", c, n, m, h, (t > 0 ? h / t : 0), s,
             (s > 0 ? h / s : 0), (o > 0 ? m / o : 0)
    }'
  done
done
