# shellcheck shell=bash
# Sourced by the sandbox tests (subnet.sh, fattree.sh): a sandbox of their
# own, taken down when the test exits however it exits; sb, fail, ok,
# listens. Needs $build and $here.
sandbox=$here/../../scripts/sandbox.sh
# `sb run ... &` backgrounds this function in a subshell of its own: $! is
# that subshell, and a signal to it does not reach the command (use bg).
sb() { bash "$sandbox" "$@"; }

# sandbox_test PREFIX NET NAME: the sandbox's names, network and state
# directory ($OPENIB_SANDBOX; $OPENIB_SANDBOX.net is free for a topology).
sandbox_test() {
  export OPENIB_BUILD=$build OPENIB_SANDBOX_PREFIX=$1 OPENIB_SANDBOX_NET=$2
  export OPENIB_SANDBOX
  OPENIB_SANDBOX=$(mktemp -d "${TMPDIR:-/tmp}/$3-XXXXXX")
  rmdir "$OPENIB_SANDBOX"
  trap sandbox_cleanup EXIT
}
# In the background: `run` execs, so $! is the command itself.
pp_pid=''
sandbox_cleanup() {
  [[ -n $pp_pid ]] && kill "$pp_pid" 2>/dev/null
  sb down || true
  rm -f "$OPENIB_SANDBOX.net"
}
fail() {
  echo "FAIL: $*"
  [[ -f $OPENIB_SANDBOX/opensm.log ]] && { echo "--- opensm.log (tail)"; tail -30 "$OPENIB_SANDBOX/opensm.log"; }
  [[ -f $OPENIB_SANDBOX/ibfabric.log ]] && { echo "--- ibfabric.log (tail)"; tail -15 "$OPENIB_SANDBOX/ibfabric.log"; }
  exit 1
}
ok() { echo "ok: $*"; }
# listens HOST PORT PID: waits (at most 10 s) until a TCP socket listens on
# PORT in HOST's namespace; fails if PID exits first.
listens() {
  for _ in $(seq 100); do
    [[ -n $(sb run "$1" ss -Hltn "sport = :$2") ]] && return 0
    kill -0 "$3" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}
# rc_pingpong SERVER CLIENT SERVER_ADDR ITERS: openib-rc-pingpong, ITERS x
# 4 KiB from host CLIENT to its server on host SERVER; fails the test
# unless both ends finish every iteration.
rc_pingpong() {
  local pp=$build/examples/openib-rc-pingpong out
  bash "$sandbox" run "$1" "$pp" -n "$4" -s 4096 >"$OPENIB_SANDBOX/pp-server.log" 2>&1 &
  pp_pid=$!
  listens "$1" 18515 "$pp_pid" || fail "rc-pingpong server does not listen: $(cat "$OPENIB_SANDBOX/pp-server.log")"
  out=$(sb run "$2" timeout 60 "$pp" -n "$4" -s 4096 "$3") || fail "rc-pingpong client: $out"
  wait "$pp_pid" || fail "rc-pingpong server: $(cat "$OPENIB_SANDBOX/pp-server.log")"
  pp_pid=''
  grep -q "$4 iters" <<<"$out" || fail "rc-pingpong: $out"
}

# ---- a host's port and ibd's paths (docs/sa.md "In ibd") -------------------
# field HOST KEY [PORT]: a line of `ibstat simhca0 PORT`.
field() { sb run "$1" ibstat simhca0 "${3:-1}" | awk -F': ' -v k="$2" '$1 ~ k {print $2}'; }
lid_of() { field "$1" "Base lid"; }
ibdctl_counters() { "$build/src/tools/ibdctl" --socket "$OPENIB_SANDBOX/$1/ibd.sock" counters; }
counter() { ibdctl_counters "$1" | awk -v k="$2" '$1 == k {print $2}'; }
# The port GID fe80::GUID of a host, as ibstat gives its Port GUID.
gid_of() {
  local g
  g=$(field "$1" "Port GUID")
  g=${g#0x}
  printf 'fe80::%x:%x:%x:%x' $((16#${g:0:4})) $((16#${g:4:4})) $((16#${g:8:4})) $((16#${g:12:4}))
}
# path HOST GID [ibdctl path options]: ibd's answer as "key value" lines.
path() { "$build/src/tools/ibdctl" --socket "$OPENIB_SANDBOX/$1/ibd.sock" path "${@:2}" 2>&1; }
val() { awk -v k="$1" '$1 == k {print $2}'; }
# sq SAQUERY_OUTPUT FIELD: a field of `saquery -p`'s dump.
sq() { awk -F'[.]+' -v k="$2" '$1 ~ "^[ \t]*" k "$" {print $2}' <<<"$1"; }
# same_path A B [ibdctl path options]: ibd's path from host A to host B
# (in $gids) has the DLID, SLID, SL, MTU, rate and packet lifetime that
# `saquery -p --sgid-to-dgid` prints on A; fails the test otherwise.
# saquery is tried up to 3 times (over a lossy fabric it may time out).
same_path() {
  local a=$1 b=$2 mine theirs=''
  mine=$(path "$a" "${gids[$b]}" "${@:3}") || fail "ibdctl path $a -> $b: $mine"
  # saquery is the reference, not under test: a few tries (more where the
  # cables drop packets on purpose: SAQUERY_TRIES).
  for _ in $(seq "${SAQUERY_TRIES:-3}"); do
    theirs=$(sb run "$a" saquery -p --sgid-to-dgid "${gids[$a]}-${gids[$b]}" 2>&1) && break
  done
  grep -q "PathRecord dump" <<<"$theirs" || fail "saquery -p $a -> $b: $theirs"
  [[ $(val dlid <<<"$mine") == "$(sq "$theirs" dlid)" && $(val slid <<<"$mine") == "$(sq "$theirs" slid)" ]] ||
    fail "$a -> $b: ibd's path and saquery's differ in LIDs:
$mine
$theirs"
  [[ $(val sl <<<"$mine") == $(($(sq "$theirs" sl))) &&
     $(val mtu <<<"$mine") == $((128 << ($(sq "$theirs" mtu) & 63))) &&
     $(val rate <<<"$mine") == $(($(sq "$theirs" rate) & 63)) &&
     $(val packet_life_time <<<"$mine") == $(($(sq "$theirs" pkt_life) & 63)) ]] ||
    fail "$a -> $b: ibd's path and saquery's differ in SL, MTU, rate or lifetime:
$mine
$theirs"
}

# Commands in the hosts' namespaces in the background (the RDMA CM tests):
# bg NAME HOST CMD... runs CMD there with its output in log_of NAME and its
# PID in bg; kill_bg (in the test's EXIT trap) ends those still running;
# waitfor NAME TEXT [TRIES] waits (0.1 s apart) until the output shows TEXT.
bg_pids=()
log_of() { echo "$OPENIB_SANDBOX/$1.log"; }
bg() {
  local name=$1 host=$2
  shift 2
  bash "$sandbox" run "$host" "$@" >"$(log_of "$name")" 2>&1 &  # execs: $! is the command
  bg=$!
  bg_pids+=("$bg")
}
# The verbs-ABI tests (test/abi): with libs set to our libraries' path,
# d HOST CMD... runs CMD there over them; fg HOST SECONDS CMD... does so in
# the foreground, its output in out and its status in rc.
d() { sb run "$1" env "LD_LIBRARY_PATH=$libs" "${@:2}"; }
fg() {
  local host=$1 secs=$2
  shift 2
  rc=0
  out=$(d "$host" timeout "$secs" "$@" 2>&1) || rc=$?
}
kill_bg() { for p in "${bg_pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
waitfor() {
  for _ in $(seq "${3:-300}"); do grep -q -- "$2" "$(log_of "$1")" 2>/dev/null && return 0; sleep 0.1; done
  fail "$1 never printed '$2': $(cat "$(log_of "$1")")"
}
# until_ok TRIES CMD...: CMD until it succeeds, 0.2 s apart.
until_ok() {
  local n=$1
  shift
  for _ in $(seq "$n"); do "$@" >/dev/null 2>&1 && return 0; sleep 0.2; done
  return 1
}
# ib0_up HOST ADDR/LEN: ibd's IPoIB interface (--ipoib ib0) up with the
# address, once it exists; waits for its carrier (the broadcast group joined).
ib0_up() {
  local h=$1
  until_ok 150 sb run "$h" ip link show ib0 || fail "$h: no ib0"
  sb run "$h" ip addr add "$2" dev ib0
  sb run "$h" ip link set ib0 up
  until_ok 150 test_carrier "$h" || fail "$h: ib0 has no carrier"
}
test_carrier() { [[ $(sb run "$1" cat /sys/class/net/ib0/carrier 2>/dev/null) == 1 ]]; }
