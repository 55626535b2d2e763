#!/usr/bin/env bash
# Runs openib-bench (docs/performance.md): starts two ibd daemons on two
# simhca devices cabled back to back (LIDs 1 and 2) over a shared-memory
# cable (default) or over UDP on 127.0.0.1, or (--cable switch) each cabled
# over UDP to one switch of ibfabric, LIDs from OpenSM; runs the bench
# against them, stops everything by PID.
#
#   bash bench/run.sh [BUILD_DIR] [--cable shm|udp|switch] [--simhca one|each] [--udp-ref]
#                     [--ibd-arg ARG]... [--simhca-arg ARG]... [-- openib-bench options, e.g. --quick]
#
# --simhca one (default): one simhca process serves both devices, and its
# device loop runs both (docs/simhca.md §13 "Several devices"); each ibd
# opens its device with --device vfio-user:SOCKET. --simhca each: every
# ibd starts its own embedded simhca, as a plain `ibd` does.
# --cable switch: ibfabric runs one 2-port switch (topology written to the
# scratch directory), each ibd's embedded simhca is cabled to it as
# `ibfabric --print-bindings` says (implies --simhca each), and Debian's
# OpenSM on ibd A (through the project's libibumad.so.3) assigns the LIDs
# and the switch's forwarding table; the bench starts at SUBNET UP.
# --udp-ref (with --cable switch): two more ibds (C, D) with embedded
# simhcas on a direct UDP cable (LIDs 1 and 2 of their own subnet), which
# the bench measures as its reference, interleaved (--ref-socket-a/-b).
# --ibd-arg passes ARG to both daemons, --simhca-arg to the simhca (with
# --simhca each: to both embedded ones), e.g. --simhca-arg --spin-us --simhca-arg 50
#
# BUILD_DIR defaults to build/ (as scripts/ use). Exit status: the bench's.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=${1:-$here/../build}
[[ $# -gt 0 ]] && shift
cable=shm
layout=one
ibd_args=()
simhca_args=()
udp_ref=0
ref=()
[[ ${1:-} == --udp-ref ]] && { udp_ref=1; shift; }
while [[ ${1:-} == --cable || ${1:-} == --ibd-arg || ${1:-} == --simhca || ${1:-} == --simhca-arg ]]; do
  [[ $# -ge 2 ]] || { echo "run.sh: $1 needs a value" >&2; exit 2; }
  case $1 in
    --cable) cable=$2 ;;
    --simhca) layout=$2 ;;
    --ibd-arg) ibd_args+=("$2") ;;
    --simhca-arg) simhca_args+=("$2") ;;
  esac
  shift 2
  [[ ${1:-} == --udp-ref ]] && { udp_ref=1; shift; }
done
[[ $cable == shm || $cable == udp || $cable == switch ]] ||
  { echo "run.sh: --cable shm, udp or switch, not '$cable'" >&2; exit 2; }
[[ $cable == switch ]] && layout=each
((udp_ref == 0)) || [[ $cable == switch ]] || { echo "run.sh: --udp-ref goes with --cable switch" >&2; exit 2; }
[[ $layout == one || $layout == each ]] || { echo "run.sh: --simhca one or each, not '$layout'" >&2; exit 2; }
[[ ${1:-} == -- ]] && shift
build=$(cd "$build" && pwd)
# OPENIB_BENCH: another openib-bench binary (qp_rate_ab.sh runs one bench
# against the daemons of two builds).
IBD=$build/src/ibd/ibd BENCH=${OPENIB_BENCH:-$build/bench/openib-bench} SIMHCA=$build/src/sim/simhca/simhca
IBFABRIC=$build/src/sim/fabric/ibfabric UMAD_DIR=$build/src/umad
need=("$IBD" "$BENCH" "$SIMHCA")
[[ $cable == switch ]] && need+=("$IBFABRIC")
for b in "${need[@]}"; do
  [[ -x $b ]] || { echo "run.sh: $b is not built (ninja -C $build)" >&2; exit 2; }
done

work=$(mktemp -d "${TMPDIR:-/tmp}/openib-bench-XXXXXX")
# shellcheck source=../scripts/ibd_pair.sh
source "$here/../scripts/ibd_pair.sh"
cleanup() {
  stop_daemons
  rm -rf "$work"
}
trap cleanup EXIT

PID_A='' PID_B='' PID_SIM=''
if [[ $cable == shm ]]; then
  cable_pair shm end_a end_b || exit 2
  what="shared-memory cable ${end_a%%,*}"
elif [[ $cable == switch ]]; then
  command -v opensm >/dev/null || { echo "run.sh: --cable switch needs opensm (apt-get install opensm)" >&2; exit 2; }
  cat >"$work/topo" <<'TOPO'
Switch 2 "bench-switch"
[1] "benchA"[1]
[2] "benchB"[1]

Ca 1 "benchA"
[1] "bench-switch"[1]

Ca 1 "benchB"
[1] "bench-switch"[2]
TOPO
  # Four consecutive free UDP ports (cable i: BASE+2i, BASE+2i+1).
  for _ in $(seq 50); do
    base=$(free_port)
    used=" $(used_ports | tr '\n' ' ') "
    ok=1
    for k in 0 1 2 3; do [[ $used == *" $((base + k)) "* ]] && ok=0; done
    ((ok)) && break
  done
  "$IBFABRIC" --print-bindings --base-port "$base" "$work/topo" >"$work/bindings"
  host_args() {  # NODE -> the --simhca-arg=... words of its simhca
    local w
    for w in $(awk -v n="$1" '$1 == n {$1 = ""; $2 = ""; print}' "$work/bindings"); do
      [[ $w == LOCAL=* ]] && continue
      printf '%s\n' "--simhca-arg=$w"
    done
  }
  end_a=$(awk '$1 == "benchA" {print $6}' "$work/bindings")
  end_b=$(awk '$1 == "benchB" {print $6}' "$work/bindings")
  mapfile -t host_a < <(host_args benchA | grep -v -- '--port1')
  mapfile -t host_b < <(host_args benchB | grep -v -- '--port1')
  PID_FAB='' PID_SM=''
  start_ibfabric PID_FAB "$work/fabric.ctl" "$work/ibfabric.log" --base-port "$base" --log warn "$work/topo" || exit 2
  what="UDP cables through one switch of ibfabric (pid $PID_FAB), ports $base..$((base + 3))"
else
  cable_pair udp end_a end_b || exit 2
  what="UDP cable $end_a"
fi
if [[ $layout == one ]]; then
  start_simhca PID_SIM --log warn "${simhca_args[@]}" \
    --socket "$work/hca-a.sock" --guid 0x0002c90300b0a001 --node-desc "bench HCA A" --port1 "$end_a" \
    --device --socket "$work/hca-b.sock" --guid 0x0002c90300b0b001 --node-desc "bench HCA B" --port1 "$end_b" || exit 2
  start_ibd_device a 1 "vfio-user:$work/hca-a.sock" PID_A "${ibd_args[@]}" || exit 2
  start_ibd_device b 2 "vfio-user:$work/hca-b.sock" PID_B "${ibd_args[@]}" || exit 2
  echo "run.sh: ibd A (pid $PID_A) and ibd B (pid $PID_B) on two devices of one simhca (pid $PID_SIM), $what"
else
  sargs=()
  for x in "${simhca_args[@]}"; do sargs+=(--simhca-arg "$x"); done
  if [[ $cable == switch ]]; then
    # No static LIDs: OpenSM gives them.
    start_ibd_cable a 0 "$end_a" PID_A "${ibd_args[@]}" "${sargs[@]}" "${host_a[@]}" || exit 2
    start_ibd_cable b 0 "$end_b" PID_B "${ibd_args[@]}" "${sargs[@]}" "${host_b[@]}" || exit 2
    start_opensm PID_SM "$work/a.sock" "$work/opensm.log" || exit 2
    what="$what, OpenSM (pid $PID_SM) on ibd A: SUBNET UP"
    if ((udp_ref)); then
      PID_C='' PID_D='' end_c='' end_d=''
      cable_pair udp end_c end_d || exit 2
      start_ibd_cable c 1 "$end_c" PID_C "${ibd_args[@]}" "${sargs[@]}" || exit 2
      start_ibd_cable d 2 "$end_d" PID_D "${ibd_args[@]}" "${sargs[@]}" || exit 2
      what="$what; reference: ibd C (pid $PID_C) and ibd D (pid $PID_D) on a direct UDP cable"
      ref=(--ref-socket-a "$work/c.sock" --ref-socket-b "$work/d.sock")
    fi
  else
    start_ibd_cable a 1 "$end_a" PID_A "${ibd_args[@]}" "${sargs[@]}" || exit 2
    start_ibd_cable b 2 "$end_b" PID_B "${ibd_args[@]}" "${sargs[@]}" || exit 2
  fi
  echo "run.sh: ibd A (pid $PID_A) and ibd B (pid $PID_B), each with its embedded simhca, $what"
fi
echo "run.sh: $(uname -srm), $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
echo "run.sh: load average before the run: $(cut -d" " -f1-3 /proc/loadavg) (other processes share these CPUs)"

rc=0
simpid=()
[[ -n $PID_SIM ]] && simpid=(--simhca-pid "$PID_SIM")
# Which of issue 14's targets apply; not passed to an older bench binary
# (OPENIB_BENCH from qp_rate_ab.sh's base build) that lacks the option.
blayout=()
if grep -q -a -- "--layout" "$BENCH"; then
  blayout=(--layout "$layout-$cable")
  [[ $cable == switch ]] && blayout=(--layout switch)
fi
timeout 900 "$BENCH" --socket-a "$work/a.sock" --socket-b "$work/b.sock" --ibd-pid "$PID_A" "${simpid[@]}" "${ref[@]}" \
  "${blayout[@]}" "$@" || rc=$?
# IBD_LOG=info shows ibd A's command statistics (printed at its shutdown).
if [[ ${IBD_LOG:-} == info ]]; then stop_daemons; grep -h "commands:" "$work/a.log" || true; fi
if ((rc != 0)); then
  for n in a b; do echo "--- ibd $n log (tail):"; tail -20 "$work/$n.log"; done
  [[ -n $PID_SIM ]] && { echo "--- simhca log (tail):"; tail -20 "$work/simhca.log"; }
fi
exit "$rc"
