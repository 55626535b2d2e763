#!/usr/bin/env bash
# Debian's unmodified rdmacm-utils and perftest's -R (connection by the RDMA
# CM) over our librdmacm.so.1 and libibverbs.so.1 (src/abi), between Hca1
# (Switch1) and Hca4 (Switch2) of net.2sw2path4hca with OpenSM and IPoIB
# (root, namespaces; test/sandbox/lib.sh):
#  - rping both ways, 100 pings of data printed (-v) and checked here;
#  - ucmatose (100 connections), udaddy (UD), mckey (an IPv4 group, a
#    receiver on each host and a sender);
#  - perftest's ib_{write,read,send,atomic}_{bw,lat} -R, 200 iterations each;
#  - qperf rc_bw, rc_lat, ud_lat and rc_rdma_write_bw, with qperf's own
#    connection exchange and with -cm1 (its server on Hca4);
#  - an rping server killed mid-transfer: the client sees the disconnect
#    and exits promptly (status 0: rping's own choice for a disconnect).
#  - cmtime -c 1000 (its timings printed): the client exits 0, the server
#    (which serves until killed) holds no CQ or QP afterwards and no
#    destroy was refused.
#  - rping -q both ways (own QPs: rdma_init_qp_attr, rdma_establish), the
#    data checked as rping's.
#   rdmacm_utils.sh BUILD_DIR
set -euo pipefail
build=$(cd "$1" && pwd)
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/../sandbox" && pwd)
topo=/usr/share/doc/ibsim-utils/net-examples/net.2sw2path4hca
# shellcheck source=../sandbox/lib.sh
source "$here/lib.sh"
sandbox_test sbv 198.18.33.0/25 rdmacm-utils-test
# (ucmatose -c 100 allocates a PD per connection: more than a client's
# default 64, docs/operations.md "Limits".)
export OPENIB_SANDBOX_IBD_ARGS="--ipoib ib0 --client-max-pds 128"
abi=$build/src/abi
libs=$abi:$build/src/lib
cleanup_utils() {
  kill_bg
  sandbox_cleanup
}
trap cleanup_utils EXIT
# pair NAME SECONDS "SERVER ARGS" "CLIENT ARGS" [SECS_BEFORE]: the server on Hca4
# in the background (for SECS_BEFORE, else 1 s), the client on Hca1;
# both must exit 0. The server's output in log_of NAME, the client's in out.
pair() {
  local name=$1 secs=$2 srv
  read -ra sargs <<<"$3"
  read -ra cargs <<<"$4"
  bg "$name" Hca4 env "LD_LIBRARY_PATH=$libs" timeout "$secs" "${sargs[@]}"
  srv=$bg
  sleep "${5:-1}"  # (their stdout is a file: buffered, nothing to wait for)
  fg Hca1 "$secs" "${cargs[@]}"
  ((rc == 0)) || fail "$name client ($rc): $out; server: $(cat "$(log_of "$name")")"
  wait "$srv" || fail "$name server: $(cat "$(log_of "$name")")"
}
ping4() { sb run "$1" ping -c 1 -W 1 "$2"; }

declare -A ip
for i in 1 2 3 4; do ip[Hca$i]=198.18.33.$((130 + i)); done
sb up "$topo" --sm Hca1 || fail "sandbox up"
for h in Hca1 Hca2 Hca3 Hca4; do ib0_up "$h" "${ip[$h]}/25"; done
until_ok 25 ping4 Hca1 "${ip[Hca4]}" || fail "no ping Hca1 -> Hca4"
ok "ib0 up with an address on every host"
# The libraries the binaries load are ours.
maps=$(d Hca1 ldd /usr/bin/rping)
grep -q "librdmacm.so.1 => $abi/librdmacm.so.1" <<<"$maps" && grep -q "libibverbs.so.1 => $abi/libibverbs.so.1" <<<"$maps" ||
  fail "rping does not load ours: $maps"

# ---- rping both ways, data printed and checked ----------------------------------
# rping -v prints each ping's data (-S 64, its default): "rdma-ping-N: " and
# then, to 63 bytes, the characters 'A'..'z' in turn from 'A' + N % 58; the
# client prints "ping data: " and what the server wrote back, the server
# "server ping data: " and what it read. Both must be these 100 lines.
expected=$(awk 'BEGIN { for (i = 0; i < 100; i++) { s = "rdma-ping-" i ": "; n = 63 - length(s)
  for (k = 0; k < n; k++) s = s sprintf("%c", 65 + (i + k) % 58); print s } }')
for dir in "Hca4 Hca1" "Hca1 Hca4"; do
  read -r s c <<<"$dir"
  # (the server's stderr apart: its messages would cut into a data line)
  bg "rping-$s" "$s" env "LD_LIBRARY_PATH=$libs" timeout 60 sh -c 'exec "$@" 2>"$0"' \
    "$OPENIB_SANDBOX/rping-$s.err" rping -s -a "${ip[$s]}" -v -C 100
  srv=$bg
  sleep 1
  rc=0
  out=$(d "$c" timeout 60 rping -c -a "${ip[$s]}" -v -C 100 2>"$OPENIB_SANDBOX/rping-$c.err") || rc=$?
  ((rc == 0)) || fail "rping client $c -> $s ($rc): $out $(cat "$OPENIB_SANDBOX/rping-$c.err"); server: $(cat "$(log_of "rping-$s")" "$OPENIB_SANDBOX/rping-$s.err")"
  wait "$srv" || fail "rping server on $s: $(cat "$(log_of "rping-$s")" "$OPENIB_SANDBOX/rping-$s.err")"
  [[ $(sed -n 's/^ping data: //p' <<<"$out") == "$expected" ]] || fail "rping client on $c: data: $out"
  [[ $(sed -n 's/^server ping data: //p' "$(log_of "rping-$s")") == "$expected" ]] ||
    fail "rping server on $s: data: $(cat "$(log_of "rping-$s")")"
  ok "rping $c -> $s: 100 pings, each one's data as sent on both sides ($(grep 'ping data' <<<"$out" | tail -1))"
done

# ---- ucmatose, udaddy, mckey ---------------------------------------------
# (ucmatose malloc's each connection's 100-byte buffer and registers it:
# several share a page, registered once per connection, docs/library.md
# "Memory".)
pair ucmatose 120 "ucmatose -c 100" "ucmatose -s ${ip[Hca4]} -c 100"
grep -q "test complete" <<<"$out" && grep -q "test complete" "$(log_of ucmatose)" || fail "ucmatose: $out"
ok "ucmatose Hca1 -> Hca4: 100 RC connections, data both ways ($(grep -c 'test complete' <<<"$out") test complete)"
pair udaddy 60 "udaddy" "udaddy -s ${ip[Hca4]}"
grep -q "test complete" <<<"$out" && grep -q "test complete" "$(log_of udaddy)" || fail "udaddy: $out"
ok "udaddy Hca1 -> Hca4: UD messages both ways"
# mckey: a receiver on Hca4 and one on Hca1, then the sender on Hca1.
# OpenSM programs the switches' multicast tables after it has answered a
# join, so a sender that joins and sends at once can lose its first
# datagrams (UD multicast is unreliable; a loaded machine showed it): the
# receiver on Hca1 keeps Hca1's port in the group's tree, so it is in
# place when the sender joins from that port, and the sender is run again
# (at most 5 times) until Hca4's receiver has its 10 messages.
group=239.1.33.7
bg mckey Hca4 env "LD_LIBRARY_PATH=$libs" stdbuf -oL timeout 60 mckey -m "$group" -b "${ip[Hca4]}"
rcv=$bg
bg mckey-keep Hca1 env "LD_LIBRARY_PATH=$libs" stdbuf -oL timeout 60 mckey -m "$group" -b "${ip[Hca1]}" -C 1000
keep=$bg
waitfor mckey "receiving data transfers"
waitfor mckey-keep "receiving data transfers"
sleep 1
for try in 1 2 3 4 5; do
  fg Hca1 30 mckey -m "$group" -b "${ip[Hca1]}" -s
  ((rc == 0)) || fail "mckey sender ($rc): $out"
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    kill -0 "$rcv" 2>/dev/null || break 2
    sleep 0.2
  done
done
wait "$rcv" || fail "mckey receiver on Hca4: $(cat "$(log_of mckey)")"
grep -q "test complete" "$(log_of mckey)" || fail "mckey receiver: $(cat "$(log_of mckey)")"
kill "$keep" 2>/dev/null || true
ok "mckey: Hca1 sent 10 datagrams to $group ($try run(s) of the sender), Hca4's receiver got them"

# ---- perftest with -R, qperf with and without -cm1 ----------------------------------
# Each of perftest's eight tools, connected by the RDMA CM (-R), 200
# iterations: both ends exit 0 and the client prints its results row (#bytes,
# #iterations, then BW peak, BW average and MsgRate, or t_min, t_max,
# t_typical, t_avg...), with the 200 iterations and a BW average or t_avg above 0.
# The client starts once ibd shows the server's RDMA CM id listening (a
# loaded machine took more than a second to get there, and the client's REQ
# met REJ 8).
listening() { # HOST: an RDMA CM id of HOST's ibd is listening
  "$build/src/tools/ibdctl" --socket "$OPENIB_SANDBOX/$1/ibd.sock" --json cma |
    python3 -c 'import json, sys; sys.exit(not any(i.get("state") == "listen" for i in json.load(sys.stdin).get("ids", [])))'
}
not_listening() { ! listening "$1"; }
# perftest's own race, as on Linux: with -R (which sets use_rdma_cm too)
# the server listens twice on the same port. Its first id carries the
# control connection (rdma_server_connect: listen, accept one, destroy the
# listening id); after a handshake over it the server binds and listens on a
# new id for the test's QPs (rdma_cm_server_connection), while the client,
# from the same handshake, resolves and connects at once. A client faster
# than the server's second rdma_listen gets the IB CM's REJ 8 (no listener
# for the service ID; Linux's cm_req_handler answers the same), which
# perftest reports as "RDMA_CM_EVENT_REJECTED; error: 8". (4.5-0.17's
# rdma_cm_client_connection does retry, but only after rdma_cm_destroy_cma
# has destroyed the ids and the event channel and freed the nodes that the
# next try uses again: the client fails.) `listening` above sees only the
# first listener, so such a pair is run again, at most twice more, and says
# so.
for t in ib_{write,read,send,atomic}_{bw,lat}; do
  for try in 1 2 3; do
    # (the previous server's listener gone first: ibd drops it when it sees
    # that client's socket close)
    until_ok 150 not_listening Hca4 || fail "the previous server's RDMA CM listener stays in Hca4's ibd"
    bg "$t" Hca4 env "LD_LIBRARY_PATH=$libs" timeout 60 "$t" -R -n 200
    srv=$bg
    until_ok 150 listening Hca4 || fail "$t -R server never listened: $(cat "$(log_of "$t")")"
    fg Hca1 60 "$t" -R -n 200 "${ip[Hca4]}"
    if ((rc != 0 && try < 3)) && grep -q "RDMA_CM_EVENT_REJECTED; error: 8" <<<"$out"; then
      echo "note: $t -R: the client's connect met REJ 8 (try $try); again"
      kill "$srv" 2>/dev/null || true
      wait "$srv" 2>/dev/null || true
      continue
    fi
    ((rc == 0)) || fail "$t -R client ($rc): $out; server: $(cat "$(log_of "$t")")"
    wait "$srv" || fail "$t -R server: $(cat "$(log_of "$t")")"
    break
  done
  row=$(grep -E '^ *[0-9]+ +[0-9]+ ' <<<"$out" | tail -1 | tr -s ' \t' ' ')
  col=4                       # BW average[MB/sec]
  [[ $t == *_lat ]] && col=6  # t_avg[usec]
  awk -v c=$col '$2 == 200 && $c + 0 > 0 {ok = 1} END {exit !ok}' <<<"$row" || fail "$t -R: no results row: $out"
  ok "$t -R Hca1 -> Hca4: $row"
done

# qperf: its server (port 19765, over IPoIB) on Hca4 serves each test, the
# client on Hca1 runs it for a second and prints "bw = N MB/sec" or
# "latency = N us". First with its own connection exchange (QP numbers and
# LIDs over the TCP socket), then with -cm1 (the RDMA CM; qperf ignores it
# for ud_lat, as it says). At a test's end qperf's SIGALRM (no SA_RESTART)
# must end an ibv_get_cq_event, and with -cm1 it destroys its CQ, PD and MR
# after the event channel whose context they are on. Neither end logs a
# warning: qperf deallocates its PD before deregistering its MR, and with
# -cm1 its server (0.4.11, before upstream's 83bc16e) destroys the listening
# id's QP, not the connection's, then its CQ: libibverbs' answer is EBUSY,
# and nothing is asked of ibd, which would refuse and make libopenib warn.
bg qperf-srv Hca4 env "LD_LIBRARY_PATH=$libs" timeout 300 qperf
srv=$bg
listens Hca4 19765 "$srv" || fail "qperf server not listening: $(cat "$(log_of qperf-srv)")"
for cm in "" -cm1; do
  for t in rc_bw rc_lat ud_lat rc_rdma_write_bw; do
    fg Hca1 30 qperf $cm -t 1 "${ip[Hca4]}" "$t"
    ((rc == 0)) || fail "qperf $cm $t ($rc): $out; server: $(cat "$(log_of qperf-srv)")"
    ! grep -F "[openib]" <<<"$out" || fail "qperf $cm $t: libopenib complained"
    res=$(grep -E '^ *(bw|latency) += +[0-9.]+ [A-Za-z]+(/sec)?$' <<<"$out" | tr -s ' ') || true
    awk '$3 + 0 > 0 {ok = 1} END {exit !ok}' <<<"$res" || fail "qperf $cm $t: no result: $out"
    ok "qperf $cm $t Hca1 -> Hca4:$res"
  done
done
kill -0 "$srv" 2>/dev/null || fail "qperf server gone: $(cat "$(log_of qperf-srv)")"
kill "$srv"
wait "$srv" 2>/dev/null || true
! grep -E "terminate|error|failed|\[openib\]" "$(log_of qperf-srv)" || fail "qperf server complained"

# ---- an rping server killed mid-transfer --------------------------------------------
# (no timeout(1) around the server: $srv must be rping itself, env execs it)
bg gone-server Hca4 env "LD_LIBRARY_PATH=$libs" rping -s -a "${ip[Hca4]}" -C 1000000 -S 4096
srv=$bg
sleep 1
bg gone-client Hca1 env "LD_LIBRARY_PATH=$libs" timeout 60 rping -c -a "${ip[Hca4]}" -C 1000000 -S 4096 -v
cli=$bg
waitfor gone-client "rdma-ping-100:"
kill -9 "$srv"
wait "$srv" 2>/dev/null || true
start=$SECONDS
crc=0
wait "$cli" || crc=$?
# rping's client counts a disconnect by its peer as the end of its test
# (rping_test_client returns 0 in state DISCONNECTED, 10): it must say so
# and stop, not time out (124) nor crash.
((crc != 124 && crc < 128)) || fail "rping client after its server was killed: status $crc: $(tail -5 "$(log_of gone-client)")"
grep -q "wait for RDMA_[A-Z_]* state 10" "$(log_of gone-client)" ||
  fail "rping client saw no disconnect: $(tail -5 "$(log_of gone-client)")"
((SECONDS - start <= 20)) || fail "rping client took $((SECONDS - start)) s to notice"
ok "rping server killed mid-transfer: the client sees the disconnect ($(grep -o "wait for RDMA_[A-Z_]* state 10" "$(log_of gone-client)")) and exits with $crc in $((SECONDS - start)) s after $(grep -c 'ping data' "$(log_of gone-client)") pings"

# ==== cmtime and rping -q (issue 31: rdma_create_qp's own CQs, own-QP mode) ====
# objs HOST PID: "CQS QPS" of that process's connection to HOST's ibd (none: "- -").
objs() {
  "$build/src/tools/ibdctl" --socket "$OPENIB_SANDBOX/$1/ibd.sock" clients |
    awk -v p="$2" '$2 == p {c = $6; q = $7} END {print (c == "" ? "-" : c), (q == "" ? "-" : q)}'
}
freed() { [[ $(objs "$1" "$2") == "0 0" ]]; }
# cmtime -c 1000: 1,000 connections made and torn down step by step. Its
# one ibv_qp_init_attr, reused for every id, carries the CQs
# rdma_create_qp made for the first id back to all the others: the CQs go
# with the last QP on them, not under the others (ibd would refuse:
# "CQ still used by N objects"). Debian's (44) server serves until killed.
bg cmtime-srv Hca4 env "LD_LIBRARY_PATH=$libs" cmtime -b "${ip[Hca4]}" -c 1000
srv=$bg
sleep 1
fg Hca1 120 cmtime -s "${ip[Hca4]}" -c 1000
((rc == 0)) || fail "cmtime client ($rc): $out; server: $(cat "$(log_of cmtime-srv)")"
steps=$(grep -E '^(create id|resolve addr|resolve route|create qp|connect|disconnect|destroy) *:' <<<"$out") || true
(($(wc -l <<<"$steps") == 7)) || fail "cmtime client: not every step timed: $out"
echo "$out" | sed -n '/^step/,$p'
kill -0 "$srv" 2>/dev/null || fail "cmtime server gone: $(cat "$(log_of cmtime-srv)")"
# The server freed every connection's QP and CQ as it saw the disconnects.
until_ok 25 freed Hca4 "$srv" ||
  fail "cmtime server: CQs and QPs left in ibd: $(objs Hca4 "$srv")"
kill "$srv"
wait "$srv" 2>/dev/null || true
! grep -h "still used" "$OPENIB_SANDBOX"/Hca[14]/ibd.log "$(log_of cmtime-srv)" - <<<"$out" ||
  fail "cmtime: ibd refused a destroy"
ok "cmtime Hca1 -> Hca4: 1000 connections; the server holds no CQ or QP afterwards ($(grep '^connect ' <<<"$steps" | tr -s ' '))"

# rping -q: each side creates its QP with ibv_create_qp and moves it itself
# with rdma_init_qp_attr's attributes, names it by conn_param.qp_num to
# rdma_connect / rdma_accept, and the client sends the RTU by
# rdma_establish after CONNECT_RESPONSE (docs/cma.md "Own QPs"). The data
# checked as in the rping case above.
for dir in "Hca4 Hca1" "Hca1 Hca4"; do
  read -r s c <<<"$dir"
  bg "rping-q-$s" "$s" env "LD_LIBRARY_PATH=$libs" timeout 60 sh -c 'exec "$@" 2>"$0"' \
    "$OPENIB_SANDBOX/rping-q-$s.err" rping -s -q -a "${ip[$s]}" -v -C 100
  srv=$bg
  sleep 1
  rc=0
  out=$(d "$c" timeout 60 rping -c -q -a "${ip[$s]}" -v -C 100 2>"$OPENIB_SANDBOX/rping-q-$c.err") || rc=$?
  ((rc == 0)) || fail "rping -q client $c -> $s ($rc): $out $(cat "$OPENIB_SANDBOX/rping-q-$c.err"); server: $(cat "$(log_of "rping-q-$s")" "$OPENIB_SANDBOX/rping-q-$s.err")"
  wait "$srv" || fail "rping -q server on $s: $(cat "$(log_of "rping-q-$s")" "$OPENIB_SANDBOX/rping-q-$s.err")"
  [[ $(sed -n 's/^ping data: //p' <<<"$out") == "$expected" ]] || fail "rping -q client on $c: data: $out"
  [[ $(sed -n 's/^server ping data: //p' "$(log_of "rping-q-$s")") == "$expected" ]] ||
    fail "rping -q server on $s: data: $(cat "$(log_of "rping-q-$s")")"
  ok "rping -q $c -> $s: 100 pings over QPs the application moved, each one's data as sent on both sides"
done

echo "PASS: rdmacm-utils, perftest -R and qperf over our librdmacm.so.1 across two switches"
