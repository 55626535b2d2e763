#!/usr/bin/env bash
# IPoIB over TAP against a veth pair (docs/performance.md "IPoIB"): iperf3
# TCP throughput and ping round trip between two namespaces, in both modes:
#   datagram mode (RFC 4391; MTU 2044), then connected mode (RFC 4755;
#   MTU 65520, switched at run time by `ibdctl ipoib mode connected` on
#   both hosts, docs/ipoib.md "Connected mode"), each
#   (a) over ib0 of two sandbox hosts (ibsim's net.2sw2path4hca, Hca1 and
#       Hca3, through both switches; OpenSM on Hca1), against
#   (b) a veth pair between two namespaces of this script at the same MTU;
# measured in this run, interleaved: a, b, a, b; the ratios a/b against
# the targets of issue 33 (TCP >= 0.25 x veth in datagram mode, >= 0.5 x
# in connected mode; ping round trip <= 10 x veth's).
#
#   bench/ipoib.sh [--build DIR] [--secs S] [--rounds N]
#                  [--modes datagram,connected] [--profile DIR] [--profile-secs S]
#
# --profile DIR: after the connected-mode rounds (or the last mode's),
# one more iperf3 (Hca1 -> Hca3) during which `perf record -g` samples, one
# file per process, Hca1's ibd and simhca (the sender), ibfabric, Hca3's
# ibd and simhca; their CPU time over the same seconds (from /proc) and the
# top symbols of each are printed; then another iperf3 under `perf sched
# record` (per thread of those processes and iperf3: CPU time, switches,
# wait for a CPU after a wake-up). The perf data and reports stay in DIR.
#
# In connected mode each round also runs openib-perf's RC SENDs Hca1 ->
# Hca3 (BUILD/examples/openib-perf; skipped when not built): 64 KiB
# bandwidth, 32 in flight, and 64-byte round trips back to back, the path
# beneath IPoIB-CM without ibd's TAP, printed beside the ratios.
#
# Runs as root; sandbox prefix sbj, 198.18.56.0/24; IPoIB addresses
# 198.19.56.11/.13, veth namespaces sbj-va/sbj-vb (198.19.57.1/.2).
# Everything it brings up it takes down, also on failure. Prints the load
# average with the figures.
set -euo pipefail
bench=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=$bench/../build
secs=5 rounds=2 modes=datagram,connected profile='' psecs=4
usage() {
  echo "usage: ipoib.sh [--build DIR] [--secs S] [--rounds N] [--modes datagram,connected]" \
    "[--profile DIR] [--profile-secs S]" >&2
  exit 2
}
while (($#)); do
  (($# >= 2)) || usage
  case $1 in
    --build) build=$2 ;;
    --secs) secs=$2 ;;
    --rounds) rounds=$2 ;;
    --modes) modes=$2 ;;
    --profile) profile=$2 ;;
    --profile-secs) psecs=$2 ;;
    *) usage ;;
  esac
  shift 2
done
[[ $secs =~ ^[1-9][0-9]*$ && $rounds =~ ^[1-9][0-9]*$ && $psecs =~ ^[1-9][0-9]*$ ]] || usage
IFS=, read -r -a mode_list <<<"$modes"
for m in "${mode_list[@]}"; do [[ $m == datagram || $m == connected ]] || usage; done
build=$(cd "$build" && pwd)
[[ $(id -u) == 0 ]] || { echo "ipoib.sh: must run as root" >&2; exit 1; }
if [[ -n $profile ]]; then
  command -v perf >/dev/null || { echo "ipoib.sh: --profile needs perf (Debian: linux-perf)" >&2; exit 2; }
  mkdir -p "$profile"
  profile=$(cd "$profile" && pwd)
fi
here=$bench/../test/sandbox
# shellcheck source=../test/sandbox/lib.sh
source "$here/lib.sh"
sandbox_test sbj 198.18.56 ipoib-bench
export OPENIB_SANDBOX_IBD_ARGS="--ipoib ib0"
topo=/usr/share/doc/ibsim-utils/net-examples/net.2sw2path4hca
srv_pid='' cli_pid=''
perf_pids=()
cleanup_bench() {
  local p
  [[ -n $srv_pid ]] && kill "$srv_pid" 2>/dev/null
  [[ -n $cli_pid ]] && kill "$cli_pid" 2>/dev/null
  for p in "${perf_pids[@]}"; do kill -INT "$p" 2>/dev/null || true; done
  for p in "${perf_pids[@]}"; do wait "$p" 2>/dev/null || true; done
  ip netns del sbj-va 2>/dev/null || true
  ip netns del sbj-vb 2>/dev/null || true
  sandbox_cleanup
}
trap cleanup_bench EXIT
echo "ipoib.sh: $(uname -srm), $(nproc) CPUs, load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"

ibdctl() { "$build/src/tools/ibdctl" --socket "$OPENIB_SANDBOX/$1/ibd.sock" "${@:2}"; }
mtu_of() { sb run "$1" cat /sys/class/net/ib0/mtu 2>/dev/null || echo 0; }
sb up "$topo" --sm Hca1 >/dev/null || fail "sandbox up"
for h in 1 3; do
  for _ in $(seq 150); do sb run Hca$h ip link show ib0 >/dev/null 2>&1 && break; sleep 0.2; done
  sb run Hca$h ip addr add 198.19.56.$((10 + h))/24 dev ib0
  sb run Hca$h ip link set ib0 up
  for _ in $(seq 150); do [[ $(sb run Hca$h cat /sys/class/net/ib0/carrier 2>/dev/null) == 1 ]] && break; sleep 0.2; done
done
ip netns add sbj-va
ip netns add sbj-vb
ip link add veth-sbj netns sbj-va type veth peer name veth-sbj netns sbj-vb
ip -n sbj-va addr add 198.19.57.1/24 dev veth-sbj
ip -n sbj-vb addr add 198.19.57.2/24 dev veth-sbj
for n in sbj-va sbj-vb; do ip -n $n link set veth-sbj up; ip -n $n link set lo up; done
# run_in SIDE CMD...: SIDE a/b of IPoIB (ib-a, ib-b) or veth (v-a, v-b).
run_in() {
  case $1 in
    ib-a) sb run Hca1 "${@:2}" ;;
    ib-b) sb run Hca3 "${@:2}" ;;
    v-a) ip netns exec sbj-va "${@:2}" ;;
    v-b) ip netns exec sbj-vb "${@:2}" ;;
  esac
}
declare -A dst=([ib]=198.19.56.13 [v]=198.19.57.2)

# set_mode MODE: both IPoIB hosts in MODE (ibdctl, root), ib0's MTU as the
# mode gives it (2044 / 65520), the veth pair at the same MTU; the
# neighbours forgotten on both sides, so that ARP learns the peer's flags
# (0x80 in connected mode) again; then a ping through.
set_mode() {
  local m=$1 want h
  [[ $m == connected ]] && want=65520 || want=2044
  for h in Hca1 Hca3; do
    ibdctl $h ipoib mode "$m" >/dev/null || fail "ibdctl $h ipoib mode $m"
  done
  for h in Hca1 Hca3; do
    for _ in $(seq 100); do [[ $(mtu_of $h) == "$want" ]] && break; sleep 0.1; done
    [[ $(mtu_of $h) == "$want" ]] || fail "$h: ib0's MTU $(mtu_of $h) in $m mode, not $want"
    sb run $h ip neigh flush dev ib0
    sb run $h ip route flush cache 2>/dev/null || true
  done
  for n in sbj-va sbj-vb; do ip -n $n link set veth-sbj mtu "$want"; done
  for _ in $(seq 50); do sb run Hca1 ping -c 1 -W 1 "${dst[ib]}" >/dev/null 2>&1 && break; done
  # In connected mode the first packets wait for the RC connection.
  if [[ $m == connected ]]; then
    for _ in $(seq 50); do sb run Hca1 ping -c 1 -W 1 -M "do" -s 30000 "${dst[ib]}" >/dev/null 2>&1 && break; done
    sb run Hca1 ping -c 1 -W 2 -M "do" -s 30000 "${dst[ib]}" >/dev/null 2>&1 ||
      fail "no 30000-byte ping Hca1 -> Hca3 in connected mode: $(ibdctl Hca1 ipoib)"
  fi
}

# iperf_server KIND: iperf3 -s -1 on the b side, $srv_pid, once it listens.
iperf_server() {
  run_in "$1-b" iperf3 -s -1 -B "${dst[$1]}" >/dev/null 2>&1 &
  srv_pid=$!
  for _ in $(seq 50); do [[ -n $(run_in "$1-b" ss -Hltn "sport = :5201") ]] && break; sleep 0.1; done
}
# one KIND: "Mbit/s rtt_us retransmits" for IPoIB (ib) or veth (v).
one() {
  local k=$1 out mbps rtt
  iperf_server "$k"
  out=$(run_in "$k-a" timeout $((secs + 20)) iperf3 -c "${dst[$k]}" -t "$secs" -J) || fail "iperf3 over $k: $out"
  wait "$srv_pid" || true
  srv_pid=''
  read -r mbps retr <<<"$(python3 -c 'import json,sys; e=json.load(sys.stdin)["end"]; print(round(e["sum_received"]["bits_per_second"]/1e6), e["sum_sent"].get("retransmits", 0))' <<<"$out")"
  rtt=$(run_in "$k-a" ping -q -c 200 -i 0.005 "${dst[$k]}" | awk -F'/' '/^rtt/ {print int($5 * 1000)}')
  echo "$mbps $rtt $retr"
}
# rc_ceiling: "Mbit/s rtt_us": openib-perf's RC SENDs of 64 KiB, Hca1 -> Hca3
# (path MTU 2048, 32 in flight: IPoIB-CM's 32 send slots), the fabric
# path's own ceiling for connected mode (simhca's RC, the UDP cables,
# ibfabric), without ibd's TAP in between.
rc_ceiling() {
  local pp=$build/examples/openib-perf addr out bw
  [[ -x $pp ]] || { echo "0 0"; return; }
  addr=$(awk '$1 == "Hca3" {print $3}' "$OPENIB_SANDBOX/addrs")
  sb run Hca3 timeout 60 "$pp" -t send -m bw -s 65536 -n 5000 --mtu 2048 -w 32 -I 0 >"$OPENIB_SANDBOX/rc-server.log" 2>&1 &
  srv_pid=$!
  listens Hca3 18515 "$srv_pid" || fail "openib-perf server: $(cat "$OPENIB_SANDBOX/rc-server.log")"
  out=$(sb run Hca1 timeout 60 "$pp" -t send -m bw -s 65536 -n 5000 --mtu 2048 -w 32 -I 0 "$addr" 2>&1) || fail "openib-perf: $out"
  wait "$srv_pid" || true
  srv_pid=''
  bw=$(awk '$1 == 65536 {printf "%d\n", $4 * 8 * 1.048576; exit}' <<<"$out")
  # and the round trip of 64-byte RC SENDs back to back (2 x openib-perf's
  # half round trip, t_avg), beneath ping's.
  sb run Hca3 timeout 60 "$pp" -t send -m lat -s 64 -n 2000 --mtu 2048 >"$OPENIB_SANDBOX/rc-server.log" 2>&1 &
  srv_pid=$!
  listens Hca3 18515 "$srv_pid" || fail "openib-perf server: $(cat "$OPENIB_SANDBOX/rc-server.log")"
  out=$(sb run Hca1 timeout 60 "$pp" -t send -m lat -s 64 -n 2000 --mtu 2048 "$addr" 2>&1) || fail "openib-perf: $out"
  wait "$srv_pid" || true
  srv_pid=''
  echo "$bw $(awk '$1 == 64 {printf "%d\n", 2 * $6; exit}' <<<"$out")"
}
best() { tr ' ' '\n' <<<"$1" | grep . | sort -n | tail -1; }
low() { tr ' ' '\n' <<<"$1" | grep . | sort -n | head -1; }

# pid_of HOST: its ibd; sim_of PID: ibd's embedded simhca (its child).
sim_of() { cat /proc/"$1"/task/*/children 2>/dev/null | tr ' ' '\n' | grep -m1 . || true; }
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null || echo 0; }
# profile_run: perf record -g per process during one iperf3 Hca1 -> Hca3.
profile_run() {
  local -A pid
  local n t0 t1 hz p ns
  pid[ibd-Hca1]=$(cat "$OPENIB_SANDBOX/Hca1/ibd.pid")
  pid[ibd-Hca3]=$(cat "$OPENIB_SANDBOX/Hca3/ibd.pid")
  pid[simhca-Hca1]=$(sim_of "${pid[ibd-Hca1]}")
  pid[simhca-Hca3]=$(sim_of "${pid[ibd-Hca3]}")
  pid[ibfabric]=$(cat "$OPENIB_SANDBOX/ibfabric.pid")
  hz=$(getconf CLK_TCK)
  iperf_server ib
  run_in ib-a timeout $((psecs + 22)) iperf3 -c "${dst[ib]}" -t $((psecs + 2)) -J >"$profile/iperf3.json" 2>&1 &
  cli_pid=$!
  sleep 1
  declare -A c0
  for n in "${!pid[@]}"; do c0[$n]=$(cpu_ticks "${pid[$n]}"); done
  t0=$EPOCHREALTIME
  perf_pids=()
  for n in "${!pid[@]}"; do
    perf record -g -q -o "$profile/$n.data" -p "${pid[$n]}" -- sleep "$psecs" >/dev/null 2>&1 &
    perf_pids+=($!)
  done
  for p in "${perf_pids[@]}"; do wait "$p" || true; done
  perf_pids=()
  t1=$EPOCHREALTIME
  wait "$cli_pid" || true
  cli_pid=''
  wait "$srv_pid" || true
  srv_pid=''
  echo "profile ($mode mode, Hca1 -> Hca3, ${psecs} s under perf record -g; $(python3 -c 'import json,sys; print(round(json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"]/1e6))' <"$profile/iperf3.json" 2>/dev/null || echo '?') Mbit/s; load average $(cut -d' ' -f1-3 /proc/loadavg)):"
  for n in ibd-Hca1 simhca-Hca1 ibfabric simhca-Hca3 ibd-Hca3; do
    awk -v n="$n" -v c="$(($(cpu_ticks "${pid[$n]}") - c0[$n]))" -v hz="$hz" -v t="$(awk -v a="$t0" -v b="$t1" 'BEGIN {print b - a}')" \
      'BEGIN {printf "  %-12s CPU %.0f %% of one CPU\n", n, 100 * c / hz / t}'
  done
  # The scheduler's view of another such run: how long each task waited
  # for a CPU after being woken (perf sched latency), this sandbox's
  # processes and iperf3.
  iperf_server ib
  run_in ib-a timeout $((psecs + 22)) iperf3 -c "${dst[ib]}" -t $((psecs + 2)) >/dev/null 2>&1 &
  cli_pid=$!
  sleep 1
  # This sandbox's threads, by process (CI may run other ibds meanwhile):
  # "TID LABEL" lines.
  : >"$profile/tids"
  for n in "${!pid[@]}"; do
    for p in /proc/"${pid[$n]}"/task/*; do echo "${p##*/} $n"; done >>"$profile/tids"
  done
  ns=$(awk '$1 == "Hca1" || $1 == "Hca3" {print $2}' "$OPENIB_SANDBOX/addrs")
  for p in $(for n in $ns; do ip netns pids "$n"; done); do
    [[ $(cat /proc/"$p"/comm 2>/dev/null) == iperf3 ]] && echo "$p iperf3" >>"$profile/tids"
  done
  perf sched record -o "$profile/sched.data" -- sleep "$psecs" >/dev/null 2>&1 || true
  wait "$cli_pid" || true
  cli_pid=''
  wait "$srv_pid" || true
  srv_pid=''
  perf sched latency -p -i "$profile/sched.data" 2>/dev/null >"$profile/sched.txt" || true
  echo "  -- perf sched latency ($psecs s, another iperf3; per thread: CPU time, switches, wait for a CPU after a wake-up):"
  awk -F'|' 'NR == FNR {label[$1] = $2; next}
    { split($1, t, ":"); id = t[length(t)] + 0 }
    id in label {
      for (i = 2; i <= 5; i++) { gsub(/ +/, " ", $i); sub(/^ /, "", $i); sub(/ $/, "", $i) }
      printf "    %-12s tid %-7d %s, %s switches, delay %s, %s\n", label[id], id, $2, $3, $4, $5
    }' FS=' ' "$profile/tids" FS='|' "$profile/sched.txt" | sort
  for n in ibd-Hca1 simhca-Hca1 ibfabric simhca-Hca3 ibd-Hca3; do
    perf report -i "$profile/$n.data" --no-children --sort sym --stdio -g none --percent-limit 1.5 2>/dev/null |
      grep -v '^#' | grep . >"$profile/$n.txt" || true
    echo "  -- $n (self, top 12):"
    head -12 "$profile/$n.txt" | sed 's/^/    /'
  done
}

declare -A res
for mode in "${mode_list[@]}"; do
  set_mode "$mode"
  declare -A tput=() rtt=() retr=()
  for round in $(seq "$rounds"); do
    for k in ib v; do
      out=$(one $k) || { echo "$out"; exit 1; }
      read -r m r x <<<"$out"
      tput[$k]+=" $m"
      rtt[$k]+=" $r"
      retr[$k]+=" $x"
      echo "$mode round $round $k: $m Mbit/s ($x retransmits), ping avg $r us"
    done
    if [[ $mode == connected ]]; then
      out=$(rc_ceiling) || { echo "$out"; exit 1; }
      read -r m r <<<"$out"
      tput[rc]+=" $m"
      rtt[rc]+=" $r"
      echo "$mode round $round RC SENDs (openib-perf): 64 KiB $m Mbit/s, 64 B round trip $r us"
    fi
  done
  res[$mode]="$(best "${tput[ib]}") $(best "${tput[v]}") $(low "${rtt[ib]}") $(low "${rtt[v]}") $(best "${tput[rc]:-0}") $(low "${rtt[rc]:-0}") $(cut -d' ' -f1-3 /proc/loadavg)"
done
if [[ -n $profile ]]; then
  mode=${mode_list[-1]}
  profile_run
fi

echo "ipoib.sh: Hca1 -> Hca3 over ib0 (2 switches) against a veth pair at the same MTU; best TCP, lowest ping average of $rounds rounds"
for mode in "${mode_list[@]}"; do
  read -r ti tv ri rv trc rrc l1 l5 l15 <<<"${res[$mode]}"
  if [[ $mode == connected ]]; then mtu=65520 target=0.5; else mtu=2044 target=0.25; fi
  echo "$mode mode (MTU $mtu), load average $l1 $l5 $l15 after it:"
  echo "  IPoIB-TAP: TCP $ti Mbit/s, ping $ri us"
  echo "  veth pair: TCP $tv Mbit/s, ping $rv us"
  if ((trc > 0)); then
    echo "  RC SENDs, verbs (the path beneath IPoIB-CM): 64 KiB $trc Mbit/s ($(python3 -c "print(f'{$trc / $tv:.3f}')") x veth;" \
      "IPoIB-CM carries $(python3 -c "print(f'{$ti / $trc:.2f}')") of it), 64 B round trip $rrc us back to back"
  fi
  python3 -c "
ti, tv, ri, rv, t = $ti, $tv, $ri, max($rv, 1), $target
print(f'  ratio TCP IPoIB/veth: {ti / tv:.3f} (target >= {t}: {\"met\" if ti / tv >= t else \"missed\"})')
print(f'  ratio ping RTT IPoIB/veth: {ri / rv:.1f} (target <= 10: {\"met\" if ri / rv <= 10 else \"missed\"})')"
done
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
