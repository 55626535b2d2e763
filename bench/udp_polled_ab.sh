#!/usr/bin/env bash
# The UDP cable's polled receive and ibfabric's forwarding, before and
# after (docs/performance.md "Polled UDP receive"), alternately with one
# build: `each-udp` (bench/run.sh --cable udp --simhca each) and `switch`
# (--cable switch --udp-ref), each "old" (OPENIB_UDP_POLLED=0: the receive
# threads and inboxes, and so no GRO in ibfabric; OPENIB_FABRIC_SPIN_US=0;
# OPENIB_UDP_SEGMENTS=0: no segments on the UDP cable) and "new" (the
# defaults).
# Prints the bench's ratio lines per run, with the load average.
#
#   bash bench/udp_polled_ab.sh [BUILD_DIR] [ROUNDS]
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=${1:-$here/../build}
rounds=${2:-3}
pick='load average|TCP loopback 8 B|TCP loopback 64|openib RC|reference RC|ratio openib/reference'
for ((r = 1; r <= rounds; r++)); do
  for v in old new; do
    env=()
    [[ $v == old ]] && env=(OPENIB_UDP_POLLED=0 OPENIB_FABRIC_SPIN_US=0 OPENIB_UDP_SEGMENTS=0)
    echo "== round $r each-udp $v"
    env "${env[@]}" bash "$here/run.sh" "$build" --cable udp --simhca each -- --skip-many-qps 2>&1 | grep -E "$pick" || true
  done
  for v in old new; do
    env=()
    [[ $v == old ]] && env=(OPENIB_UDP_POLLED=0 OPENIB_FABRIC_SPIN_US=0 OPENIB_UDP_SEGMENTS=0)
    echo "== round $r switch $v"
    env "${env[@]}" bash "$here/run.sh" "$build" --cable switch --udp-ref -- --skip-many-qps 2>&1 | grep -E "$pick" || true
  done
done
