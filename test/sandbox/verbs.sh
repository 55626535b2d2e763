#!/usr/bin/env bash
# Issue 31: Debian's unmodified ibverbs-utils and perftest over our
# libibverbs.so.1 (docs/library.md "Verbs ABI") between sandbox hosts of a
# switched subnet: ibsim's net.2sw2path4hca with OpenSM on Hca1, Hca1 on
# Switch1 and Hca4 on Switch2 (their packets cross both switches; the
# out-of-band TCP exchange of the tools goes over the sandbox's eth0):
#  - ibv_devinfo on Hca4 shows the LID and SM LID OpenSM gave (ibstat's);
#  - ibv_rc_pingpong, ibv_uc_pingpong, ibv_ud_pingpong, ibv_srq_pingpong
#    Hca4 -> Hca1, data checked (-c), with completion events (-e) too;
#  - ib_write_bw, ib_read_lat, ib_send_lat, ib_atomic_bw Hca4 -> Hca1;
#  - ib_write_bw whose server is killed mid-run: Hca1's ibd destroys its
#    QP, the client fails after its retries instead of hanging, and Hca1's
#    ibd serves the next pair.
# Root, network namespaces.
#   verbs.sh BUILD_DIR
set -euo pipefail
build=$(cd "$1" && pwd)
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
topo=/usr/share/doc/ibsim-utils/net-examples/net.2sw2path4hca
# shellcheck source=lib.sh
source "$here/lib.sh"
sandbox_test sbw 198.18.36.0/25 verbs-test
export LD_LIBRARY_PATH=$build/src/abi
cleanup_verbs() {
  kill_bg
  sandbox_cleanup
}
trap cleanup_verbs EXIT

sb up "$topo" --sm Hca1 || fail "sandbox up"
for h in Hca1 Hca4; do
  for _ in $(seq 50); do [[ $(field $h State) == Active ]] && break; sleep 0.2; done
  [[ $(field $h State) == Active ]] || fail "$h port 1 is $(field $h State)"
done
srv_ip=$(awk '$1 == "Hca1" {print $3}' "$OPENIB_SANDBOX/addrs")
[[ -n $srv_ip ]] || fail "no address of Hca1 in $OPENIB_SANDBOX/addrs"

info=$(sb run Hca4 timeout 30 ibv_devinfo) || fail "ibv_devinfo: $info"
lid4=$(lid_of Hca4) sm=$(field Hca4 "SM lid")
grep -Eq "port_lid:[[:space:]]+$lid4\$" <<<"$info" && grep -Eq "sm_lid:[[:space:]]+$sm\$" <<<"$info" ||
  fail "ibv_devinfo on Hca4 does not show LID $lid4 / SM LID $sm: $info"
ok "ibv_devinfo on Hca4: LID $lid4, SM LID $sm as ibstat says"

# pair SECONDS PROG ARGS...: server on Hca1, client on Hca4; both exit 0.
pair() {
  local secs=$1 port=18600 s c=0 sr=0
  shift
  sb run Hca1 timeout "$secs" "$@" -p "$port" >"$OPENIB_SANDBOX/srv.log" 2>&1 &
  s=$!
  listens Hca1 "$port" "$s" || fail "$1 server does not listen: $(cat "$OPENIB_SANDBOX/srv.log")"
  sb run Hca4 timeout "$secs" "$@" -p "$port" "$srv_ip" >"$OPENIB_SANDBOX/cli.log" 2>&1 || c=$?
  wait "$s" || sr=$?
  ((c == 0 && sr == 0)) || fail "$* (client $c, server $sr): $(cat "$OPENIB_SANDBOX/srv.log" "$OPENIB_SANDBOX/cli.log")"
}
for prog in ibv_rc_pingpong ibv_uc_pingpong ibv_srq_pingpong; do
  for ev in "" -e; do
    pair 60 "$prog" -c -n 200 -s 4096 $ev
    ok "$prog $ev Hca4 -> Hca1: $(grep 'iters in' "$OPENIB_SANDBOX/cli.log")"
  done
done
for ev in "" -e; do
  pair 60 ibv_ud_pingpong -c -n 200 -s 2048 $ev
  ok "ibv_ud_pingpong $ev Hca4 -> Hca1: $(grep 'iters in' "$OPENIB_SANDBOX/cli.log")"
done
for t in ib_write_bw ib_read_lat ib_send_lat ib_atomic_bw; do
  pair 120 "$t" -d simhca0 -n 500
  row=$(grep -E '^ *[0-9]+ +[0-9]+ ' "$OPENIB_SANDBOX/cli.log" | tail -1 | tr -s ' \t' ' ') ||
    fail "$t: no results row: $(cat "$OPENIB_SANDBOX/cli.log")"
  ok "$t Hca4 -> Hca1:$row"
done

# --- a server killed mid-run ----------------------------------------------------
# ib_write_bw's client keeps WRITEs in flight: once the server's process
# (and with it its QP, which ibd destroys) is gone, they are not acked and
# the client's requester gives up after its retries (IBA 9.7.6.1.3:
# completion with "transport retry counter exceeded"). (A ping-pong
# waiting for a receive would wait forever, as on any RC hardware.)
# Through bg (sandbox.sh run execs): $! is ib_write_bw itself. Not `sb run
# ... &`: that backgrounds the function sb in a subshell of its own, and
# SIGKILL to that subshell leaves ib_write_bw running.
bg killed Hca1 ib_write_bw -d simhca0 -D 60 -p 18601
victim=$bg
listens Hca1 18601 "$victim" || fail "ib_write_bw server does not listen: $(cat "$(log_of killed)")"
bg orphan Hca4 timeout 90 ib_write_bw -d simhca0 -D 60 -p 18601 "$srv_ip"
orphan=$bg
sleep 3  # mid-run: connected and streaming
kill -9 "$victim"
wait "$victim" 2>/dev/null || true
killed_at=$SECONDS
# The server is gone: ibd saw its connection close (docs/client-protocol.md
# §6) and destroyed its QP, so nothing answers the client's WRITEs.
hca1_qps() { "$build/src/tools/ibdctl" --socket "$OPENIB_SANDBOX/Hca1/ibd.sock" objects | awk '$3 == "QP"'; }
no_qp_on_hca1() { [[ -z $(hca1_qps) ]]; }
until_ok 50 no_qp_on_hca1 || fail "the killed server's QP is still on Hca1: $(hca1_qps)"
rc=0
wait "$orphan" || rc=$?
((rc != 0 && rc != 124)) ||
  fail "the client of a killed server: exit $rc after $((SECONDS - killed_at)) s (124: it hung): $(cat "$(log_of orphan)"; "$build/src/tools/ibdctl" --socket "$OPENIB_SANDBOX/Hca1/ibd.sock" clients)"
pair 60 ibv_rc_pingpong -c -n 50 -s 4096
ok "server killed mid-run: the client failed after $((SECONDS - killed_at)) s (exit $rc); Hca1 served the next pair"

echo "PASS: ibverbs-utils and perftest across the switches over our libibverbs.so.1"
