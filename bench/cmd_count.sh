#!/usr/bin/env bash
# Device commands per RDMA CM connection, on each side (docs/performance.md
# "Device commands"): in a sandbox of ibsim's net.2sw2path4hca (OpenSM on
# Hca1, IPoIB on Hca1 and Hca2), openib-cmtime makes N connections from
# Hca1 to Hca2's ib0 address (create QP, connect, disconnect, destroy)
# while a uprobe on simhca's command executor (Hca::execute, its opcode
# argument) counts every command each host's simhca runs; an idle window
# of the same length after it gives the background (SM sweeps, IPoIB).
# Prints the commands per connection by opcode, client and server side.
#
#   bench/cmd_count.sh [--build DIR] [--conns N]
#
# Runs as root, needs perf with uprobes; prefix sbc, 198.18.34.0/24 (ib0:
# 198.19.34.0/24). The probe it adds is removed on exit.
set -euo pipefail
bench=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=$bench/../build
conns=200
while (($#)); do
  case $1 in
    --build) build=$2; shift 2 ;;
    --conns) conns=$2; shift 2 ;;
    *) echo "usage: cmd_count.sh [--build DIR] [--conns N]" >&2; exit 2 ;;
  esac
done
build=$(cd "$build" && pwd)
[[ $(id -u) == 0 ]] || { echo "cmd_count.sh: must run as root" >&2; exit 1; }
command -v perf >/dev/null || { echo "cmd_count.sh: needs perf" >&2; exit 1; }
here=$bench/../test/sandbox
# shellcheck source=../test/sandbox/lib.sh
source "$here/lib.sh"  # sb, fail
sandbox_test sbc 198.18.34 cmd-count
export OPENIB_SANDBOX_IBD_ARGS="--ipoib ib0"
topo=/usr/share/doc/ibsim-utils/net-examples/net.2sw2path4hca
ct=$build/examples/openib-cmtime
simhca=$build/src/sim/simhca/simhca
srv='' rec='' probe=''
cleanup_count() {
  [[ -n $rec ]] && kill -INT "$rec" 2>/dev/null && wait "$rec" 2>/dev/null
  [[ -n $srv ]] && kill "$srv" 2>/dev/null
  [[ -n $probe ]] && perf probe -q -d "probe_simhca:$probe" 2>/dev/null
  sandbox_cleanup
}
trap cleanup_count EXIT

# simhca's command executor: Hca::execute(this, uint16_t opcode, ...); the
# opcode is the second integer argument (%si on x86-64).
sym=$(nm "$simhca" | awk '$2 == "T" && $3 ~ /^_ZN6openib6simhca3Hca7executeEt/ && !s {s = $3} END {print s}')
[[ -n $sym ]] || fail "no Hca::execute symbol in $simhca"
probe=cmdcount$$
perf probe -q -x "$simhca" -a "$probe=$sym op=%si:u16" || fail "perf probe"

sb up "$topo" --sm Hca1 >/dev/null || fail "sandbox up"
for h in 1 2; do ib0_up Hca$h 198.19.34.$h/24; done
# The simhca of each host: the child of that host's ibd.
sim_pid() { pgrep -P "$(cat "$OPENIB_SANDBOX/$1/ibd.pid")" -x simhca | head -1; }
p1=$(sim_pid Hca1) p2=$(sim_pid Hca2)
[[ -n $p1 && -n $p2 ]] || fail "no simhca on Hca1/Hca2"

# record FILE CMD...: the probe's events, system-wide, while CMD runs.
record() {
  local out=$1
  shift
  perf record -q -o "$out" -e "probe_simhca:$probe" -a 2>/dev/null &
  rec=$!
  sleep 1  # perf is recording
  "$@"
  kill -INT "$rec"
  wait "$rec" || true
  rec=''
}
run_cmtime() {
  bash "$sandbox" run Hca2 "$ct" -b 198.19.34.2 -c "$conns" --timeout 60 >"$OPENIB_SANDBOX/server.log" 2>&1 &
  srv=$!
  for _ in $(seq 100); do grep -q listening "$OPENIB_SANDBOX/server.log" && break; sleep 0.1; done
  sb run Hca1 "$ct" -s 198.19.34.2 -c "$conns" --timeout 60 --json >"$OPENIB_SANDBOX/client.json" ||
    fail "cmtime client"
  wait "$srv" || fail "cmtime server: $(tail -3 "$OPENIB_SANDBOX/server.log")"
  srv=''
}
timed_run() {
  local t0=$EPOCHREALTIME
  run_cmtime
  awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN {printf "%.2f\n", b - a}' >"$OPENIB_SANDBOX/run.secs"
}
run_cmtime  # warm: ARP, path and address caches filled, as bench/cma.sh's second run
record "$OPENIB_SANDBOX/conns.data" timed_run
secs=$(cat "$OPENIB_SANDBOX/run.secs")
record "$OPENIB_SANDBOX/idle.data" sleep "$secs"

counts() { perf script -i "$1" -F pid,trace 2>/dev/null | awk '{print $1, $NF}'; }
python3 - "$conns" "$p1" "$p2" "$secs" <(counts "$OPENIB_SANDBOX/conns.data") <(counts "$OPENIB_SANDBOX/idle.data") <<'PY'
import collections, sys
conns, p1, p2, secs = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
names = {0x0001: "NOP", 0x0103: "QUERY_PORT", 0x0104: "SET_PORT", 0x0105: "QUERY_GID", 0x0106: "SET_GID",
         0x0300: "CREATE_CQ", 0x0301: "DESTROY_CQ", 0x0302: "QUERY_CQ", 0x0400: "CREATE_QP",
         0x0401: "MODIFY_QP", 0x0402: "QUERY_QP", 0x0403: "DESTROY_QP", 0x0600: "ALLOC_PD",
         0x0601: "DEALLOC_PD", 0x0700: "CREATE_MKEY", 0x0701: "DESTROY_MKEY", 0x0800: "CREATE_AH",
         0x0801: "DESTROY_AH", 0x0900: "ALLOC_UAR", 0x0901: "DEALLOC_UAR", 0x0a00: "ATTACH_MCG",
         0x0a01: "DETACH_MCG"}
def load(path):
    c = collections.Counter()
    for line in open(path):
        pid, op = line.split()
        c[(pid, int(op.split("=")[1]))] += 1
    return c
run, idle = load(sys.argv[5]), load(sys.argv[6])
print(f"{conns} RDMA CM connections (openib-cmtime, warm caches) in {secs} s; idle window of the same length after")
for side, pid in (("client Hca1", p1), ("server Hca2", p2)):
    ops = sorted({op for (p, op) in run if p == pid} | {op for (p, op) in idle if p == pid})
    total = 0.0
    print(f"  {side} (simhca pid {pid}):")
    for op in ops:
        n, bg = run[(pid, op)], idle[(pid, op)]
        per = (n - bg) / conns
        total += per
        print(f"    {names.get(op, hex(op)):<12} {n:7d} in the run, {bg:5d} idle   {per:6.2f} per connection")
    print(f"    {'total':<12} {total:6.2f} device commands per connection")
PY
