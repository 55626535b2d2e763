#!/usr/bin/env bash
# IPoIB over TAP against a veth pair (docs/performance.md "IPoIB"): iperf3
# TCP throughput and ping round trip between two namespaces,
#   (a) over ib0 of two sandbox hosts (ibsim's net.2sw2path4hca, Hca1 and
#       Hca3, through both switches; OpenSM on Hca1), MTU 2044;
#   (b) over a veth pair between two namespaces of this script, MTU 2044;
# measured in this run, interleaved: a, b, a, b; the ratios a/b.
#
#   bench/ipoib.sh [--build DIR] [--secs S]
#
# Runs as root; sandbox prefix sbp, 198.18.24.0/24; veth namespaces
# sbp-va/sbp-vb (198.19.24.1/.2). Everything it brings up it takes down,
# also on failure. Prints the load average with the figures.
set -euo pipefail
bench=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=$bench/../build
secs=5
while (($#)); do
  case $1 in
    --build) build=$2; shift 2 ;;
    --secs) secs=$2; shift 2 ;;
    *) echo "usage: ipoib.sh [--build DIR] [--secs S]" >&2; exit 2 ;;
  esac
done
build=$(cd "$build" && pwd)
[[ $(id -u) == 0 ]] || { echo "ipoib.sh: must run as root" >&2; exit 1; }
here=$bench/../test/sandbox
# shellcheck source=../test/sandbox/lib.sh
source "$here/lib.sh"
sandbox_test sbp 198.18.24 ipoib-bench
export OPENIB_SANDBOX_IBD_ARGS="--ipoib ib0"
topo=/usr/share/doc/ibsim-utils/net-examples/net.2sw2path4hca
srv_pid=''
cleanup_bench() {
  [[ -n $srv_pid ]] && kill "$srv_pid" 2>/dev/null
  ip netns del sbp-va 2>/dev/null || true
  ip netns del sbp-vb 2>/dev/null || true
  sandbox_cleanup
}
trap cleanup_bench EXIT

sb up "$topo" --sm Hca1 >/dev/null || fail "sandbox up"
for h in 1 3; do
  for _ in $(seq 150); do sb run Hca$h ip link show ib0 >/dev/null 2>&1 && break; sleep 0.2; done
  sb run Hca$h ip addr add 198.19.24.$((10 + h))/24 dev ib0
  sb run Hca$h ip link set ib0 up
  for _ in $(seq 150); do [[ $(sb run Hca$h cat /sys/class/net/ib0/carrier 2>/dev/null) == 1 ]] && break; sleep 0.2; done
done
ip netns add sbp-va
ip netns add sbp-vb
ip link add veth-sbp netns sbp-va type veth peer name veth-sbp netns sbp-vb
ip -n sbp-va addr add 198.19.25.1/24 dev veth-sbp
ip -n sbp-vb addr add 198.19.25.2/24 dev veth-sbp
for n in sbp-va sbp-vb; do ip -n $n link set veth-sbp mtu 2044 up; ip -n $n link set lo up; done
# run_in SIDE CMD...: SIDE a/b of IPoIB (ib-a, ib-b) or veth (v-a, v-b).
run_in() {
  case $1 in
    ib-a) sb run Hca1 "${@:2}" ;;
    ib-b) sb run Hca3 "${@:2}" ;;
    v-a) ip netns exec sbp-va "${@:2}" ;;
    v-b) ip netns exec sbp-vb "${@:2}" ;;
  esac
}
declare -A dst=([ib]=198.19.24.13 [v]=198.19.25.2)
for _ in $(seq 50); do sb run Hca1 ping -c 1 -W 1 "${dst[ib]}" >/dev/null 2>&1 && break; done

# one KIND: "Mbit/s rtt_us" for IPoIB (ib) or veth (v).
one() {
  local k=$1 out mbps rtt
  run_in "$k-b" iperf3 -s -1 -B "${dst[$k]}" >/dev/null 2>&1 &
  srv_pid=$!
  for _ in $(seq 50); do [[ -n $(run_in "$k-b" ss -Hltn "sport = :5201") ]] && break; sleep 0.1; done
  out=$(run_in "$k-a" timeout $((secs + 20)) iperf3 -c "${dst[$k]}" -t "$secs" -J) || fail "iperf3 over $k"
  wait "$srv_pid" || true
  srv_pid=''
  mbps=$(python3 -c 'import json,sys; print(round(json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"]/1e6))' <<<"$out")
  rtt=$(run_in "$k-a" ping -q -c 200 -i 0.005 "${dst[$k]}" | awk -F'/' '/^rtt/ {print int($5 * 1000)}')
  echo "$mbps $rtt"
}
declare -A tput rtt
for round in 1 2; do
  for k in ib v; do
    read -r m r <<<"$(one $k)"
    tput[$k]+=" $m"
    rtt[$k]+=" $r"
    echo "round $round $k: $m Mbit/s, ping avg $r us"
  done
done
best() { tr ' ' '\n' <<<"$1" | sort -n | tail -1; }
low() { tr ' ' '\n' <<<"$1" | grep . | sort -n | head -1; }
ti=$(best "${tput[ib]}") tv=$(best "${tput[v]}") ri=$(low "${rtt[ib]}") rv=$(low "${rtt[v]}")
echo "IPoIB-TAP (Hca1 -> Hca3, 2 switches): TCP $ti Mbit/s, ping $ri us"
echo "veth pair (MTU 2044):                 TCP $tv Mbit/s, ping $rv us"
python3 -c "print(f'ratio TCP IPoIB/veth: {$ti/$tv:.3f} (target >= 0.5)'); print(f'ratio ping RTT IPoIB/veth: {$ri/max($rv,1):.1f}')"
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
