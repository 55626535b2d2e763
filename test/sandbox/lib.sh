# shellcheck shell=bash
# Sourced by the sandbox tests (subnet.sh, fattree.sh): a sandbox of their
# own, taken down when the test exits however it exits; sb, fail, ok,
# listens. Needs $build and $here.
sandbox=$here/../../scripts/sandbox.sh
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
