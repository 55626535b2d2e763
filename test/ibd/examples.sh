#!/usr/bin/env bash
# The examples (examples/) against two ibd daemons, each with its embedded
# simhca, cabled back to back over UDP on 127.0.0.1 (meson test
# ibd-examples, suite ibd-clients):
#   openib-rc-pingpong and openib-ud-pingpong, server on ibd A and client on
#   ibd B (exit 0 and the "usec/iter" line on both sides); the client runs
#   unprivileged (user nobody, through the 0666 socket; copies of the
#   examples in the scratch directory, which nobody can reach even when the
#   build directory is in a clone only root may enter);
#   openib-perf send/write/read, bandwidth and latency, with a small -n.
# Usage: examples.sh IBD IBDCTL EXAMPLES_DIR
# Everything it starts it stops by PID, also on failure; every step has a
# time limit.
set -euo pipefail

IBD=$1 IBDCTL=$2 EX=$3
RC="$EX/openib-rc-pingpong" UD="$EX/openib-ud-pingpong" PERF="$EX/openib-perf"
for b in "$IBD" "$IBDCTL" "$RC" "$UD" "$PERF"; do
  [[ -x $b ]] || { echo "FAIL: $b is not built"; exit 1; }
done

work=$(mktemp -d "${TMPDIR:-/tmp}/ibd-examples-XXXXXX")
chmod 755 "$work"
failures=0
# shellcheck source=../../scripts/ibd_pair.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/ibd_pair.sh"
# shellcheck source=../../scripts/unprivileged.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/unprivileged.sh"

cleanup() {
  stop_daemons
  rm -rf "$work"
}
trap cleanup EXIT

pa=$(free_port)
pb=$pa
while ((pb == pa)); do pb=$(free_port); done
PID_A='' PID_B=''
start_ibd a 1 "$pa" "$pb" PID_A --socket-mode 0666
start_ibd b 2 "$pb" "$pa" PID_B --socket-mode 0666
SA="$work/a.sock" SB="$work/b.sock"
echo "ibd A pid $PID_A on $SA, ibd B pid $PID_B on $SB, cable 127.0.0.1:$pa <-> :$pb"

# The unprivileged runs must really be unprivileged, and reach the binaries
# (copies in $work/bin, with the libraries they need).
reachable_copy "$work/bin" "$RC" "$UD" "$PERF"
NOBODY_ENV=(env LD_LIBRARY_PATH="$work/bin/lib")
[[ $("${AS_NOBODY[@]}" id -u) == 65534 ]] || { echo "FAIL: setpriv to nobody does not work"; exit 1; }
for b in "$RC" "$UD" "$PERF"; do
  "${AS_NOBODY[@]}" "${NOBODY_ENV[@]}" "$work/bin/${b##*/}" --help >/dev/null ||
    { echo "FAIL: nobody cannot run $work/bin/${b##*/}"; exit 1; }
done

# pair NAME SERVER_EXPECT CLIENT_EXPECT PROG nobody|root ARGS...: the
# server (on ibd A, root) in the background, the client (on ibd B, as
# `nobody` when asked) once the server listens; both must exit 0 and print
# what is expected of them ("" expects nothing).
pair() {
  local name=$1 sexpect=$2 cexpect=$3 prog=$4 nobody=$5
  shift 5
  local port
  port=$(free_port)
  local args=("$@")
  local sout="$work/$name.server.out" cout="$work/$name.client.out"
  OPENIB_SOCKET=$SA timeout 90 "$prog" -p "$port" "${args[@]}" >"$sout" 2>&1 &
  local spid=$!
  local crc=0
  local runner=() cprog=$prog
  if [[ $nobody == nobody ]]; then
    runner=("${AS_NOBODY[@]}" "${NOBODY_ENV[@]}")
    cprog=$work/bin/${prog##*/}
  fi
  # The client once the server listens (wait_listen: at most 10 s).
  if wait_listen "$port"; then
    OPENIB_SOCKET=$SB timeout 90 "${runner[@]}" env OPENIB_SOCKET="$SB" \
      "$cprog" -p "$port" "${args[@]}" 127.0.0.1 >"$cout" 2>&1 || crc=$?
  else
    echo "server does not listen on TCP port $port" >"$cout"
    crc=1
    kill "$spid" 2>/dev/null || true
  fi
  local src=0
  wait "$spid" || src=$?
  local ok=1
  ((src == 0)) || { echo "FAIL: $name server exit $src"; ok=0; }
  ((crc == 0)) || { echo "FAIL: $name client exit $crc"; ok=0; }
  [[ -z $sexpect ]] || grep -q -- "$sexpect" "$sout" || { echo "FAIL: $name server printed no '$sexpect'"; ok=0; }
  [[ -z $cexpect ]] || grep -q -- "$cexpect" "$cout" || { echo "FAIL: $name client printed no '$cexpect'"; ok=0; }
  echo "--- $name server:"; cat "$sout"
  echo "--- $name client${runner:+ (as nobody)}:"; cat "$cout"
  if ((ok)); then echo "ok: $name"; else failures=$((failures + 1)); fi
}

pair rc-pingpong "usec/iter" "usec/iter" "$RC" nobody -n 200 -s 4096
pair rc-pingpong-root "usec/iter" "usec/iter" "$RC" root -n 200 -s 64
pair ud-pingpong "usec/iter" "usec/iter" "$UD" nobody -n 200 -s 1024
pair ud-pingpong-root "usec/iter" "usec/iter" "$UD" root -n 200 -s 64
# openib-perf: the client initiates and prints the table.
for t in send write read; do
  pair "perf-$t-bw" "" "BW average" "$PERF" root -t "$t" -m bw -n 200 -s 65536
  pair "perf-$t-lat" "" "t_avg" "$PERF" nobody -t "$t" -m lat -n 200 -s 8
done

# The daemons are still there and answer, then stop cleanly on SIGTERM.
for s in "$SA" "$SB"; do
  "$IBDCTL" --socket "$s" --json clients >/dev/null || { echo "FAIL: ibdctl on $s"; failures=$((failures + 1)); }
done
for p in "$PID_A" "$PID_B"; do
  kill -TERM "$p"
  rc=0
  for _ in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
  wait "$p" || rc=$?
  ((rc == 0)) || { echo "FAIL: ibd $p exited $rc after SIGTERM"; failures=$((failures + 1)); }
done
daemons=()

if ((failures)); then
  echo "ibd-examples: $failures failure(s)"
  for n in a b; do echo "--- ibd $n log:"; tail -30 "$work/$n.log"; done
  exit 1
fi
echo "ibd-examples: all passed"
