#!/usr/bin/env bash
# RDMA CM connections by IP address (docs/performance.md "RDMA CM
# connections"), in a sandbox of ibsim's net.2sw2path4hca with OpenSM on
# Hca1 and IPoIB on Hca1 and Hca2:
#   (a) TCP loopback connect/accept/close per second, 100 in flight
#       (tcp-conn-rate, one process: the kernel's best case);
#   (b) openib-cmtime Hca1 -> Hca2's ib0 address (across both switches), N
#       connections at once: create id, resolve address, resolve route,
#       create QP, connect, disconnect, destroy, the time of each step; run
#       twice, the second with the ARP cache and the path cache warm (the
#       issue's figure);
#   (b)/(a), both measured in this run (target >= 0.2).
#
#   bench/cma.sh [--build DIR] [--conns N]
#
# Runs as root; prefix sbb, 198.18.33.0/24 (ib0: 198.19.33.0/24). Prints the load average.
set -euo pipefail
bench=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=$bench/../build
conns=1000
while (($#)); do
  case $1 in
    --build) build=$2; shift 2 ;;
    --conns) conns=$2; shift 2 ;;
    *) echo "usage: cma.sh [--build DIR] [--conns N]" >&2; exit 2 ;;
  esac
done
build=$(cd "$build" && pwd)
[[ $(id -u) == 0 ]] || { echo "cma.sh: must run as root" >&2; exit 1; }
here=$bench/../test/sandbox
# shellcheck source=../test/sandbox/lib.sh
source "$here/lib.sh"  # sb, counter, ib0_up; fail, ok
sandbox_test sbb 198.18.33 cma-bench
export OPENIB_SANDBOX_IBD_ARGS="--ipoib ib0 --client-max-qps 12000 --uid-max-qps 12000"
topo=/usr/share/doc/ibsim-utils/net-examples/net.2sw2path4hca
ct=$build/examples/openib-cmtime
srv=''
cleanup_bench() {
  [[ -n $srv ]] && kill "$srv" 2>/dev/null
  sandbox_cleanup
}
trap cleanup_bench EXIT

sb up "$topo" --sm Hca1 >/dev/null || fail "sandbox up"
for h in 1 2; do ib0_up Hca$h 198.19.33.$h/24; done
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"

# cmtime_run: one client run against a fresh server; its JSON.
cmtime_run() {
  bash "$sandbox" run Hca2 "$ct" -b 198.19.33.2 -c "$conns" --timeout 60 >"$OPENIB_SANDBOX/server.log" 2>&1 &
  srv=$!
  for _ in $(seq 100); do grep -q listening "$OPENIB_SANDBOX/server.log" && break; sleep 0.1; done
  sb run Hca1 "$ct" -s 198.19.33.2 -c "$conns" --timeout 60 --json || fail "cmtime client"
  wait "$srv" || fail "cmtime server: $(tail -3 "$OPENIB_SANDBOX/server.log")"
  srv=''
}
tcp1=$(sb run Hca1 "$build/bench/tcp-conn-rate" 20000 100)
cold=$(cmtime_run)
warm=$(cmtime_run)
tcp2=$(sb run Hca1 "$build/bench/tcp-conn-rate" 20000 100)
rate() { sed -n 's/.*= \([0-9.]*\) conn\/s.*/\1/p' <<<"$1"; }
t1=$(rate "$tcp1") t2=$(rate "$tcp2")
python3 - "$t1" "$t2" "$cold" "$warm" <<'PY'
import json, sys
t1, t2 = float(sys.argv[1]), float(sys.argv[2])
cold, warm = json.loads(sys.argv[3]), json.loads(sys.argv[4])
t = max(t1, t2)
print(f"(a) TCP loopback: {t1:.0f} and {t2:.0f} conn/s (the better one counts: {t:.0f})")
for name, j in (("cold (first run: ARP and path caches empty)", cold), ("warm", warm)):
    print(f"(b) RDMA CM {name}: {j['connections']} connections, {j['conn_per_s']:.1f} conn/s")
    for step, st in j["steps"].items():
        print(f"      {step:<15} total {st['total_us'] / 1000:9.1f} ms   per connection {st['per_conn_us']:9.1f} us")
print(f"(b)/(a), warm = {warm['conn_per_s'] / t:.4f} (target >= 0.2)")
PY
echo "ARP on Hca1: $(counter Hca1 arp.requests) requests, $(counter Hca1 arp.cache_hits) cache hits, $(counter Hca1 arp.shared) shared, $(counter Hca1 arp.kernel_resolutions) kernel resolutions"
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
