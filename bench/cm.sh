#!/usr/bin/env bash
# CM connections (docs/performance.md "CM connections"), in a sandbox of
# ibsim's net.2sw2path4hca with OpenSM on Hca1:
#   (a) TCP loopback connect/accept/close per second, 100 in flight
#       (tcp-conn-rate, one process: the kernel's best case);
#   (b) CM connections per second between Hca1's and Hca2's ibds (across
#       both switches): connect, accept, established, disconnect, timewait
#       exit, 100 in flight (openib-cm-pingpong --conns; each connection's
#       QP and its INIT/RTR/RTS/ERROR transitions included, as a user pays
#       them);
#   (b)/(a), both measured in this run (target >= 0.25);
#   (c) ibd's memory per open connection, 10,000 held at once: the CM's
#       own (cm.memory_bytes, active and passive side; target <= 1 KiB) and
#       the whole ibd's RSS growth (the clients' QPs included).
#
#   bench/cm.sh [--build DIR] [--conns N]
#
# Runs as root; prefix sbn, 198.18.29.0/24. Prints the load average.
set -euo pipefail
bench=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=$bench/../build
conns=2000
while (($#)); do
  case $1 in
    --build) build=$2; shift 2 ;;
    --conns) conns=$2; shift 2 ;;
    *) echo "usage: cm.sh [--build DIR] [--conns N]" >&2; exit 2 ;;
  esac
done
build=$(cd "$build" && pwd)
[[ $(id -u) == 0 ]] || { echo "cm.sh: must run as root" >&2; exit 1; }
here=$bench/../test/sandbox
# shellcheck source=../test/sandbox/lib.sh
source "$here/lib.sh"  # sb, field, counter, gid_of; fail, ok
sandbox_test sbn 198.18.29 cm-bench
export OPENIB_SANDBOX_IBD_ARGS="--client-max-qps 12000 --uid-max-qps 12000 --client-max-cm-ids 12000 --uid-max-cm-ids 12000"
topo=/usr/share/doc/ibsim-utils/net-examples/net.2sw2path4hca
pp=$build/examples/openib-cm-pingpong
hold=/tmp/cm-bench-hold.$$
srv=''
cleanup_bench() {
  [[ -n $srv ]] && kill "$srv" 2>/dev/null
  rm -f "$hold"
  sandbox_cleanup
}
trap cleanup_bench EXIT
rss_kib() { awk '/^VmRSS/ {print $2}' "/proc/$(cat "$OPENIB_SANDBOX/$1/ibd.pid")/status"; }

sb up "$topo" --sm Hca1 >/dev/null || fail "sandbox up"
for h in Hca1 Hca2; do
  for _ in $(seq 150); do [[ $(field $h State) == Active && $(lid_of $h) != 0 ]] && break; sleep 0.2; done
done
g2=$(gid_of Hca2)
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"

# (a), (b): TCP first, then the CM, then TCP again (the machine is noisy).
tcp1=$(sb run Hca1 "$build/bench/tcp-conn-rate" 20000 100)
bash "$sandbox" run Hca2 "$pp" --serve "$conns" -q >"$OPENIB_SANDBOX/server.log" 2>&1 &
srv=$!
for _ in $(seq 100); do grep -q listening "$OPENIB_SANDBOX/server.log" && break; sleep 0.1; done
cm=$(sb run Hca1 "$pp" --dgid "$g2" --conns "$conns" --inflight 100 -q)
wait "$srv" || fail "server: $(cat "$OPENIB_SANDBOX/server.log")"
srv=''
tcp2=$(sb run Hca1 "$build/bench/tcp-conn-rate" 20000 100)
rate() { sed -n 's/.*= \([0-9.]*\) conn\/s.*/\1/p' <<<"$1"; }
t1=$(rate "$tcp1") t2=$(rate "$tcp2") c=$(rate "$cm")
t=$(python3 -c "print(max($t1, $t2))")
echo "(a) TCP loopback: $t1 and $t2 conn/s (the better one counts: $t)"
echo "(b) CM, Hca1 -> Hca2: $cm"
python3 -c "print(f'(b)/(a) = {$c / $t:.4f} (target >= 0.25)')"

# (c): 10,000 connections held.
m1=$(counter Hca1 cm.memory_bytes) m2=$(counter Hca2 cm.memory_bytes)
r1=$(rss_kib Hca1) r2=$(rss_kib Hca2)
bash "$sandbox" run Hca2 "$pp" --serve 10000 -q >"$OPENIB_SANDBOX/server.log" 2>&1 &
srv=$!
for _ in $(seq 100); do grep -q listening "$OPENIB_SANDBOX/server.log" && break; sleep 0.1; done
rm -f "$hold"
OPENIB_CM_HOLD_FILE=$hold bash "$sandbox" run Hca1 "$pp" --dgid "$g2" --conns 10000 --hold -q \
  >"$OPENIB_SANDBOX/client.log" 2>&1 &
cli=$!
for _ in $(seq 3000); do [[ -e $hold ]] && break; kill -0 "$cli" 2>/dev/null || break; sleep 0.1; done
[[ -e $hold ]] || fail "10,000 connections: $(tail -3 "$OPENIB_SANDBOX/client.log")"
m1b=$(counter Hca1 cm.memory_bytes) m2b=$(counter Hca2 cm.memory_bytes)
r1b=$(rss_kib Hca1) r2b=$(rss_kib Hca2)
rm -f "$hold"
wait "$cli" || fail "client: $(tail -3 "$OPENIB_SANDBOX/client.log")"
wait "$srv" || fail "server: $(tail -3 "$OPENIB_SANDBOX/server.log")"
srv=''
echo "(c) 10,000 connections open: $(grep 'all 10000 open' "$OPENIB_SANDBOX/client.log")"
echo "    CM memory per connection: active (Hca1) $(((m1b - m1) / 10000)) B, passive (Hca2) $(((m2b - m2) / 10000)) B (target <= 1024)"
echo "    ibd RSS growth per connection (CM, QP objects, allocator): active $(((r1b - r1) * 1024 / 10000)) B, passive $(((r2b - r2) * 1024 / 10000)) B"
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
