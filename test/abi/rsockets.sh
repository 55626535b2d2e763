#!/usr/bin/env bash
# rsockets (<rdma/rsocket.h>, src/abi/rdmacm/rsocket) over our
# librdmacm.so.1 and libibverbs.so.1: Debian's unmodified binaries that use
# them, and Debian's librspreload.so, between Hca1 (the clients) and Hca2
# (the servers) of ibsim's net.1 (one switch) with OpenSM on Hca1 and IPoIB
# addresses (root, namespaces; test/sandbox/lib.sh). Checked:
#  1. rstream, custom mode, the data verified (-T v): 1,000 x 1000 bytes
#     nonblocking (its default), 100 x 64 KiB blocking (-T b), 20 x 1 MB
#     async (-T a: rpoll before each call); both ends exit 0 and the client's
#     row names the test (custom), the size, the count and the total. Then
#     rstream's default test, verified: a latency connection then a
#     bandwidth connection, 64 B, 4 KiB, 64 KiB and 1 MiB each: its 8 rows
#     and no error (it exits 0 whatever fails inside a test: the rows are
#     the proof); 300 s at most. (rstream's -T takes one letter: "-T b -T
#     v", not "-T bv", which prints its usage.)
#  2. riostream (riomap, riowrite, riounmap): 10 x 4 KiB, nonblocking and
#     blocking.
#  3. rcopy: the rcopy server (no arguments but -p: it serves until killed)
#     and the client copying a 5 MiB random file to it: identical (cmp).
#  4. librspreload.so (LD_PRELOAD, with our LD_LIBRARY_PATH) under
#     netcat-traditional (nc.traditional): it imports socket, bind, listen,
#     accept, connect, read, write, select, and nothing v44's preload does
#     not intercept (nm -D: no accept4, epoll, fcntl64, sendfile64).
#     (Not netcat-openbsd: its listener calls accept4, and its client adds
#     SOCK_NONBLOCK to socket()'s type, which v44's rsocket() refuses, so
#     the preload quietly gives it a TCP socket. Not iperf3 -F: its sender
#     garbles the file after a partial write, TCP or not.) nc on Hca1 sends
#     a 5 MiB random file to nc listening on Hca2: identical. Over
#     rsockets, not a TCP fallback: while the server waits, its ibd holds an
#     RDMA CM id listening on the port and its namespace has no TCP
#     listener there (a client falling back to TCP would meet a RST); the
#     server host's ibd counts the connect request; neither namespace shows
#     a TCP socket on the port, during the transfer (sampled) or after it
#     (TIME-WAIT would stay 60 s). The control: the same transfer without
#     the preload (TCP over IPoIB) trips each of those checks.
#  5. A killed peer: rstream (64 KiB transfers, blocking and nonblocking)
#     with its server SIGKILLed mid-transfer (both ends holding their QP for
#     a second; the client is sending), then with its client SIGKILLed (the
#     server is receiving): the survivor exits by itself within 20 s, not by
#     a signal, and then neither host's ibd holds anything of the two.
#  6. rsocket_hostile (rsocket_hostile.c), a peer that speaks rdma-core's
#     rsocket wire format and breaks it, against rstream servers run as
#     "rstream -C 100 -S 16 -T b" (blocking). The outcomes asserted:
#     (a) version: a connect request whose rs_conn_data has version 0x7f is
#         rejected (RDMA_CM_EVENT_REJECTED, rdma-core's rule), and the
#         server keeps listening: (b) goes to the same server. (If it were
#         accepted instead, that server must still end without a signal
#         and (b) gets a new one; the script says so.)
#     (b) oversize: a valid connection, then a DATA message claiming
#         0x1FFFFFFF bytes (more than the server's data_buf, more than a
#         rsocket message may carry) and 2,000 zero-payload DATA messages
#         beyond the credits: the server drops the connection (the hostile
#         sees RDMA_CM_EVENT_DISCONNECTED or its sends fail, within 8 s),
#         and rstream exits by itself: within 20 s of the hostile's end (not
#         killed by its timeout(1): status 124), with a status of its own
#         (not 128+N: no signal, no crash; 255 is rstream's "-1" after
#         perror("rrecv") or perror("rsend")), and without a result row.
#     (c) flood: on a new server, a legitimate exchange (every message
#         within the credits; the server then blocked in rsend for want of
#         the hostile's credits), then 2,000 one-byte DATA messages beyond
#         the server's credits: as (b).
#     Then: both ibds alive (their process; ibdctl answers), no QP left in
#     either ibd, and a new rstream pair (100 x 4 KiB, verified) works.
#  7. Datagram rsockets (SOCK_DGRAM) against Debian's udpong server
#     ("udpong -b SERVER -p 7174", it serves until killed):
#     (a) Debian's udpong client, custom mode: 2,000 echoes of 1000 bytes
#         nonblocking (-T e), 2,000 of 64 bytes blocking (-T e -T b), 2,000
#         of 1,500 bytes async (-T e -T a: rpoll before each call): exit 0
#         and the row says 4k transfers (each echo counts twice); then
#         20,000 one-way 1 KiB datagrams: the row reports how many the
#         server counted (datagrams may be dropped, as UDP's: the server's
#         receive queue overflows), at least one.
#     (b) rsocket_dgram_check (rsocket_dgram_check.c): every echo answer
#         equal to what was sent, for 69 sizes from 16 bytes to the largest
#         payload (2,032), EMSGSIZE beyond, MSG_PEEK, MSG_TRUNC, rrecvfrom's
#         source, rsendto on an unconnected socket. And they travel as UD
#         SENDs, not over UDP: the server's ib0 (IPoIB, where the kernel's
#         UDP goes) receives at most 40 packets during the check's 150-odd
#         datagrams (all of them, were they UDP; a few are, while each end
#         resolves its address handle). (Not the kernel's Udp counters: the
#         cables are UDP.)
#     (c) rsocket_dgram_hostile (rsocket_dgram_hostile.c): malformed UDP
#         headers, bogus QPNs and a burst of 5,000 ("udp"), then malformed
#         UD messages, a receive-queue overrun and a wrong Q_Key ("ud");
#         after each, a well-formed login is answered (exit 0); the server
#         (OPENIB_RSOCKET_DEBUG=1) says it dropped datagrams. The udpong
#         server still runs and a new udpong client's echo test passes.
#     (d) udpong's server SIGKILLed: its ibd holds nothing of it afterwards.
# Every command is bounded (timeout(1), or a watch of our own), and the
# sandbox with everything started in it goes at exit. While rsockets do not
# work (rsocket() failing), check 1 fails within seconds, saying why.
#   rsockets.sh BUILD_DIR [RSOCKET_HOSTILE]
set -euo pipefail
build=$(cd "$1" && pwd)
hostile=${2:-$build/test/abi/rsocket_hostile}
dgram_check=${3:-$build/test/abi/rsocket_dgram_check}
dgram_hostile=${4:-$build/test/abi/rsocket_dgram_hostile}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/../sandbox" && pwd)
topo=/usr/share/doc/ibsim-utils/net-examples/net.1
preload=/usr/lib/x86_64-linux-gnu/rsocket/librspreload.so
nc=/bin/nc.traditional
# shellcheck source=../sandbox/lib.sh
source "$here/lib.sh"
sandbox_test sby 198.18.48.0/25 rsockets-test
export OPENIB_SANDBOX_IBD_ARGS="--ipoib ib0"
abi=$build/src/abi
libs=$abi:$build/src/lib
ibdctl=$build/src/tools/ibdctl
watch_pid=''
cleanup_rsockets() {
  [[ -n $watch_pid ]] && kill "$watch_pid" 2>/dev/null
  kill_bg
  sandbox_cleanup
}
trap cleanup_rsockets EXIT
for f in "$preload" /usr/bin/rstream /usr/bin/riostream /usr/bin/rcopy /usr/bin/udpong "$nc" "$hostile" "$dgram_check" "$dgram_hostile"; do
  [[ -x $f || -f $f ]] || fail "$f is missing (scripts/setup.sh installs rdmacm-utils, librdmacm1 and netcat-traditional)"
done
S=Hca2  # the servers
C=Hca1  # the clients (and OpenSM)
declare -A ip
for i in 1 2; do ip[Hca$i]=198.18.48.$((130 + i)); done
SIP=${ip[$S]}

cma_json() { "$ibdctl" --socket "$OPENIB_SANDBOX/$1/ibd.sock" --json cma; }
# listening HOST PORT: an RDMA CM id of HOST's ibd listens on PORT (its
# "src" is ADDRESS:PORT; its "port" is the HCA's).
listening() {
  cma_json "$1" | python3 -c 'import json, sys
ids = json.load(sys.stdin).get("ids", [])
sys.exit(not any(i.get("state") == "listen" and i.get("src", "").rsplit(":", 1)[-1] == sys.argv[1] for i in ids))' "$2"
}
# await_listen HOST PORT PID: until HOST's ibd has an RDMA CM id listening
# on PORT (30 s at most); fails at once if PID exits first.
await_listen() {
  for _ in $(seq 150); do
    listening "$1" "$2" 2>/dev/null && return 0
    kill -0 "$3" 2>/dev/null || return 1
    sleep 0.2
  done
  return 1
}
cma_counter() { # HOST NAME: a counter of HOST's RDMA CM service
  cma_json "$1" | python3 -c 'import json, sys; print(json.load(sys.stdin).get("counters", {}).get(sys.argv[1], 0))' "$2"
}
# objs HOST PID: "CQS QPS" of that process's connection to HOST's ibd (none: "- -").
objs() {
  "$ibdctl" --socket "$OPENIB_SANDBOX/$1/ibd.sock" clients |
    awk -v p="$2" '$2 == p {c = $6; q = $7} END {print (c == "" ? "-" : c), (q == "" ? "-" : q)}'
}
has_qp() { local o; o=$(objs "$1" "$2"); [[ ${o#* } =~ ^[0-9]+$ ]] && ((${o#* } > 0)); }
# gone HOST PID: HOST's ibd holds no CQ or QP of PID (its connection gone, or empty).
gone() { local o; o=$(objs "$1" "$2"); [[ $o == "- -" || $o == "0 0" ]]; }
# all_qps HOST: the QPs of all of HOST's ibd's clients.
all_qps() { "$ibdctl" --socket "$OPENIB_SANDBOX/$1/ibd.sock" clients | awk '$2 ~ /^[0-9]+$/ {n += $7} END {print n + 0}'; }
no_qps() { [[ $(all_qps "$1") == 0 ]]; }
# by_itself STATUS: the status is a program's own exit (rstream's -1 is
# 255), not a signal's 128+N (N <= 64) nor timeout(1)'s 124..127.
by_itself() { (($1 < 124 || $1 > 192)); }
# exits_within PID SECONDS: whether PID (ours) ends within SECONDS.
exits_within() {
  for _ in $(seq $(($2 * 10))); do
    kill -0 "$1" 2>/dev/null || return 0
    sleep 0.1
  done
  ! kill -0 "$1" 2>/dev/null
}
# pair NAME SECONDS PORT "SERVER ARGS" "CLIENT ARGS": the server on $S in the
# background, the client on $C once the server listens; both must exit 0.
# The server's output in log_of NAME, the client's in out.
pair() {
  local name=$1 secs=$2 port=$3 srv
  read -ra sargs <<<"$4"
  read -ra cargs <<<"$5"
  bg "$name" "$S" env "LD_LIBRARY_PATH=$libs" timeout "$secs" "${sargs[@]}"
  srv=$bg
  await_listen "$S" "$port" "$srv" || fail "$name: the server does not listen on $port: $(cat "$(log_of "$name")")"
  fg "$C" "$secs" "${cargs[@]}"
  ((rc == 0)) || fail "$name client ($rc$(why "$rc" "$out$(cat "$(log_of "$name")")")): $out; server: $(cat "$(log_of "$name")")"
  wait "$srv" || fail "$name server ($?): $(cat "$(log_of "$name")")"
}
# why STATUS OUTPUT: what an rstream status and output say, for a failure.
why() {
  local n
  case $1 in
    124) echo -n ", its timeout" ;;
    16) echo -n ", rstream's do_poll: rpoll reported POLLHUP" ;;
    8) echo -n ", rstream's do_poll: rpoll reported POLLERR" ;;
  esac
  n=$(grep -o 'verification failed byte [0-9]*' <<<"$2" | head -1 | grep -o '[0-9]*$') || true
  if [[ -n $n ]]; then
    if ((n % 524288 == 0)); then
      echo -n "; byte $n of the stream is $((n / 524288)) x 512 KiB: the start of a half of rstream's 1 MiB receive buffer"
    else
      echo -n "; byte $n is $((n % 524288)) bytes into a half (512 KiB) of rstream's receive buffer"
    fi
  fi
}
# rdma-core's examples/common.c size_str and cnt_str, as rstream prints them.
size_str() {
  local s=$1 base=1 mag='' frac=0
  if ((s >= 1 << 30)); then base=$((1 << 30)) mag=g
  elif ((s >= 1 << 20)); then base=$((1 << 20)) mag=m
  elif ((s >= 1 << 10)); then base=$((1 << 10)) mag=k; fi
  ((s / base < 10)) && frac=$(((s % base) * 10 / base))
  if ((frac)); then echo "$((s / base)).$frac$mag"; else echo "$((s / base))$mag"; fi
}
cnt_str() {
  local c=$1
  if ((c >= 1000000000)); then echo "$((c / 1000000000))b"
  elif ((c >= 1000000)); then echo "$((c / 1000000))m"
  elif ((c >= 1000)); then echo "$((c / 1000))k"
  else echo "$c"; fi
}
# custom_row OUTPUT SIZE COUNT: the "custom" row of rstream's or
# riostream's output (name bytes xfers iters total time Gb/sec usec/xfer),
# one iteration of COUNT x SIZE each way, usec/xfer above 0; fails otherwise.
custom_row() {
  local row
  row=$(grep -E '^custom ' <<<"$1" | tr -s ' ' | tail -1) || true
  awk -v s="$(size_str "$2")" -v c="$(cnt_str "$3")" -v t="$(size_str $((2 * $2 * $3)))" \
    '$1 == "custom" && $2 == s && $3 == c && $4 == 1 && $5 == t && $8 + 0 > 0 {ok = 1} END {exit !ok}' <<<"$row" ||
    return 1
  echo "$row"
}
errors_re='rsend|rrecv|rpoll|raccept|rconnect|rbind|rsocket|riomap|riowrite|verification failed|No RDMA|\[openib\]'

sb up "$topo" --sm "$C" || fail "sandbox up"
for h in "$C" "$S"; do ib0_up "$h" "${ip[$h]}/25"; done
until_ok 25 sb run "$C" ping -c 1 -W 1 "$SIP" || fail "no ping $C -> $S"
ok "ib0 up with an address on both hosts"
# The libraries the binaries load are ours.
for b in /usr/bin/rstream /usr/bin/riostream /usr/bin/rcopy "$preload"; do
  maps=$(d "$C" ldd "$b")
  grep -q "librdmacm.so.1 => $abi/librdmacm.so.1" <<<"$maps" || fail "$b does not load our librdmacm: $maps"
done
echo "name      bytes   xfers   iters   total       time     Gb/sec  usec/xfer  (rstream's and riostream's columns)"

# ==== 1. rstream ===============================================================
port=7471
for spec in "1000 1000 nonblocking -T n" "100 65536 blocking -T b" "20 1000000 async -T a"; do
  read -r count size label topt <<<"$spec"
  args="-p $port -C $count -S $size $topt -T v"
  t0=$SECONDS
  pair "rstream-$label" 120 "$port" "rstream -b $SIP $args" "rstream -s $SIP $args"
  row=$(custom_row "$out" "$size" "$count") || fail "rstream $label: no result row for $count x $size: $out"
  ! grep -Eq "$errors_re" <<<"$out" || fail "rstream $label client: $out"
  ok "rstream $label ($args), verified, $((SECONDS - t0)) s: $row"
  port=$((port + 1))
done

# The default test: two connections, 8 rows (sizes 64, 4k, 64k, 1m; a
# latency row each, then a bandwidth row each). It took 23 to 63 s here
# (2 CPUs; most of it the 100,000 round trips of 64_lat, 55 to 245 us
# each), and both ends spin (nonblocking): with other work on the machine
# it takes several times as long, hence 300 s. Its rows are line-buffered
# (stdbuf), so that a timeout shows how far it got.
t0=$SECONDS
pair rstream-default 300 "$port" "stdbuf -oL rstream -b $SIP -p $port -T v" "stdbuf -oL rstream -s $SIP -p $port -T v"
took=$((SECONDS - t0))
! grep -Eq "$errors_re" <<<"$out$(cat "$(log_of rstream-default)")" || fail "rstream default test: $out; server: $(cat "$(log_of rstream-default)")"
rows=$(grep -E '^[0-9]+[km]?_(lat|bw) ' <<<"$out" | tr -s ' ') || true
if [[ $(awk '{printf "%s ", $1}' <<<"$rows") != "64_lat 4k_lat 64k_lat 1m_lat 64_bw 4k_bw 64k_bw 1m_bw " ]] ||
  ! awk '$8 + 0 <= 0 {bad = 1} END {exit bad}' <<<"$rows"; then
  fail "rstream default test: not its 8 rows: $out"
fi
ok "rstream default test (-T v), both connections, in $took s:"
while read -r r; do echo "    $r"; done <<<"$rows"
port=$((port + 1))

# ==== 2. riostream ===============================================================
for topt in "" "-T b"; do
  args="-p $port -C 10 -S 4096 $topt"
  pair riostream 60 "$port" "riostream -b $SIP $args" "riostream -s $SIP $args"
  row=$(custom_row "$out" 4096 10) || fail "riostream $args: no result row: $out"
  ok "riostream ($args): $row"
  port=$((port + 1))
done

# ==== 3. rcopy ===================================================================
src=$OPENIB_SANDBOX/rcopy-src.bin
dst=$OPENIB_SANDBOX/rcopy-dst.bin
head -c $((5 << 20)) /dev/urandom >"$src"
bg rcopy-srv "$S" env "LD_LIBRARY_PATH=$libs" timeout 120 rcopy -p 7427
srv=$bg
await_listen "$S" 7427 "$srv" || fail "rcopy server does not listen: $(cat "$(log_of rcopy-srv)")"
fg "$C" 60 rcopy "$src" "$SIP:$dst" -p 7427
((rc == 0)) || fail "rcopy client ($rc): $out; server: $(cat "$(log_of rcopy-srv)")"
figure=$(grep -E "^$((5 << 20)) bytes in " <<<"$out") || fail "rcopy client: $out"
waitfor rcopy-srv "closing...done"
cmp "$src" "$dst" || fail "rcopy: the copy differs"
kill "$srv"  # timeout(1) passes the TERM on to rcopy
wait "$srv" 2>/dev/null || true
ok "rcopy $C -> $S: 5 MiB random file, identical: $figure"

# ==== 4. librspreload.so under netcat-traditional ========================================
# nm -D: nc.traditional imports only calls that v44's preload intercepts
# (the check behind the choice of program).
imports=$(nm -D --undefined-only "$nc" | awk '{sub(/@.*/, "", $2); print $2}')
for call in socket bind listen accept connect read write select; do
  grep -qx "$call" <<<"$imports" || fail "$nc does not import $call: not the program this check was written for"
done
! grep -Exq 'accept4|epoll_(create1?|ctl|wait|pwait)|fcntl64|sendfile64|ppoll|pselect' <<<"$imports" ||
  fail "$nc imports calls librspreload (v44) does not intercept: $(grep -Ex 'accept4|epoll_.*|fcntl64|sendfile64|ppoll|pselect' <<<"$imports" | tr '\n' ' ')"
nsrc=$OPENIB_SANDBOX/nc-src.bin
head -c $((5 << 20)) /dev/urandom >"$nsrc"
# tcp_on PORT: the TCP sockets (any state) on PORT in both namespaces.
tcp_on() { for h in "$S" "$C"; do sb run "$h" ss -Htan "( sport = :$1 or dport = :$1 )" | sed "s/^/$h: /"; done; }
# nc_transfer NAME PORT [PRELOAD]: nc.traditional on $C sends $nsrc to
# nc.traditional listening on $S, which writes it to a file (with PRELOAD
# as LD_PRELOAD of both); fails unless both exit 0 and the file arrives
# identical. Sets listener (what $S showed for the port before the client
# came: cm, tcp, cm+tcp), seen (TCP sockets on the port, sampled during
# the transfer and after it), reqs (RDMA CM connect requests counted by
# $S's ibd meanwhile), secs (the client's run).
nc_transfer() {
  local name=$1 port=$2 ndst=$OPENIB_SANDBOX/$1-dst.bin srv before t0
  local -a pre=()
  [[ -n ${3:-} ]] && pre=(env "LD_PRELOAD=$3")
  before=$(cma_counter "$S" cma.connect_requests)
  # shellcheck disable=SC2016  # for the inner sh
  bg "$name-srv" "$S" env "LD_LIBRARY_PATH=$libs" timeout 60 sh -c 'exec "$@" </dev/null >"$0"' "$ndst" \
    "${pre[@]}" "$nc" -l -n -s "$SIP" -p "$port"
  srv=$bg
  listener=none
  for _ in $(seq 150); do
    if listening "$S" "$port" 2>/dev/null; then listener=cm; break; fi
    if [[ -n $(sb run "$S" ss -Htln "sport = :$port") ]]; then listener=tcp; break; fi
    kill -0 "$srv" 2>/dev/null || break
    sleep 0.2
  done
  [[ $listener != none ]] || fail "$name: the nc server does not listen: $(cat "$(log_of "$name-srv")")"
  [[ $listener == tcp || -z $(sb run "$S" ss -Htln "sport = :$port") ]] || listener=cm+tcp
  (while :; do tcp_on "$port"; sleep 0.05; done) >"$OPENIB_SANDBOX/$name-ss.log" 2>&1 &
  watch_pid=$!
  t0=$EPOCHREALTIME
  # shellcheck disable=SC2016  # for the inner sh
  fg "$C" 60 sh -c 'exec "$@" <"$0"' "$nsrc" "${pre[@]}" "$nc" -n -q 1 "$SIP" "$port"
  secs=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN {printf "%.2f", b - a}')
  ((rc == 0)) || fail "$name: nc client ($rc): $out; server: $(cat "$(log_of "$name-srv")")"
  wait "$srv" || fail "$name: nc server ($?): $(cat "$(log_of "$name-srv")")"
  sleep 0.5
  kill "$watch_pid"
  wait "$watch_pid" 2>/dev/null || true
  watch_pid=''
  tcp_on "$port" >>"$OPENIB_SANDBOX/$name-ss.log"
  seen=$(sort -u "$OPENIB_SANDBOX/$name-ss.log")
  reqs=$(($(cma_counter "$S" cma.connect_requests) - before))
  cmp "$nsrc" "$ndst" || fail "$name: the file arrived different ($(stat -c %s "$ndst") bytes)"
}
nc_transfer preload 5301 "$preload"
[[ $listener == cm ]] || fail "librspreload: nc's listener is not (only) an rsocket (listener: $listener): $(cat "$(log_of preload-srv)")"
[[ -z $seen ]] || fail "librspreload: TCP sockets on port 5301 (a TCP fallback): $seen"
((reqs >= 1)) || fail "librspreload: $S's ibd counted $reqs RDMA CM connect requests"
ok "librspreload.so under nc.traditional $C -> $S: 5 MiB random file, identical, in $secs s; over rsockets: an RDMA CM listener and no TCP one on the port, $reqs connect request(s) in $S's ibd, no TCP socket on the port in either namespace during or after"
# The control: the same without the preload (TCP over IPoIB): each check sees it.
nc_transfer plain 5302
[[ $listener == tcp ]] || fail "control: plain nc's listener seen as '$listener', not tcp"
[[ -n $seen ]] || fail "control: no TCP socket seen on port 5302 for a plain TCP transfer: the check would miss a fallback"
((reqs == 0)) || fail "control: $S's ibd counted $reqs RDMA CM connect requests for plain TCP"
ok "control: the same nc transfer without the preload (TCP over IPoIB, $secs s) shows a TCP listener, no connect request in ibd, and TCP sockets on the port: $(head -2 <<<"$seen" | tr -s ' ' | tr '\n' ';')"

# ==== 5. a peer killed mid-transfer ===============================================
# Each iteration the client sends 1,000,000 x 64 KiB before the server
# answers: killing the server leaves the client in rsend, killing the
# client leaves the server in rrecv. (No timeout(1) around either: $bg is
# rstream itself; the survivor is bounded below.)
port=7480
for case in "server b" "server n" "client b" "client n"; do
  read -r victim topt <<<"$case"
  args="-p $port -C 1000000 -S 65536 -T $topt"
  read -ra a <<<"$args"
  bg "kill-srv-$port" "$S" env "LD_LIBRARY_PATH=$libs" rstream -b "$SIP" "${a[@]}"
  srv=$bg
  await_listen "$S" "$port" "$srv" || fail "rstream $args server does not listen: $(cat "$(log_of "kill-srv-$port")")"
  bg "kill-cli-$port" "$C" env "LD_LIBRARY_PATH=$libs" rstream -s "$SIP" "${a[@]}"
  cli=$bg
  { until_ok 100 has_qp "$C" "$cli" && until_ok 100 has_qp "$S" "$srv"; } ||
    fail "rstream $args: no QP in ibd for the client ($(objs "$C" "$cli")) or the server ($(objs "$S" "$srv")): $(cat "$(log_of "kill-cli-$port")")"
  sleep 1
  { kill -0 "$cli" 2>/dev/null && kill -0 "$srv" 2>/dev/null; } ||
    fail "rstream $args: ended before the kill: $(cat "$(log_of "kill-cli-$port")" "$(log_of "kill-srv-$port")")"
  if [[ $victim == server ]]; then
    dead=$srv dead_host=$S live=$cli live_host=$C live_log=$(log_of "kill-cli-$port") what="server SIGKILLed: the client (in rsend)"
  else
    dead=$cli dead_host=$C live=$srv live_host=$S live_log=$(log_of "kill-srv-$port") what="client SIGKILLed: the server (in rrecv)"
  fi
  kill -9 "$dead"
  wait "$dead" 2>/dev/null || true
  t0=$EPOCHREALTIME
  if ! exits_within "$live" 20; then
    kill -9 "$live" 2>/dev/null || true
    fail "rstream $args, $what still runs 20 s after its peer was killed: $(tail -3 "$live_log")"
  fi
  secs=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN {printf "%.1f", b - a}')
  st=0
  wait "$live" || st=$?
  by_itself "$st" || fail "rstream $args, $what died of signal $((st - 128)): $(tail -3 "$live_log")"
  until_ok 50 gone "$live_host" "$live" || fail "rstream $args: $live_host's ibd still holds the survivor's objects: $(objs "$live_host" "$live")"
  until_ok 50 gone "$dead_host" "$dead" || fail "rstream $args: $dead_host's ibd still holds the killed one's objects: $(objs "$dead_host" "$dead")"
  last=$(grep -v '^name' "$live_log" | tail -1) || true
  ok "rstream ($args) $what exits by itself with $st in $secs s (${last:-no message}); neither ibd holds anything of them"
  port=$((port + 1))
done

# ==== 6. a hostile peer =========================================================
# hostile_server NAME PORT: an rstream server for the hostile (in srv).
hostile_server() {
  bg "$1" "$S" env "LD_LIBRARY_PATH=$libs" timeout 60 rstream -b "$SIP" -p "$2" -C 100 -S 16 -T b
  srv=$bg
  await_listen "$S" "$2" "$srv" || fail "$1: rstream server does not listen: $(cat "$(log_of "$1")")"
}
# server_survives NAME WHAT: the server (srv) ends by itself within 20 s,
# with its own status (by_itself: not its timeout's 124, not a signal's),
# and prints no result row.
server_survives() {
  local st=0
  if ! exits_within "$srv" 20; then
    fail "$2: the rstream server still runs 20 s after the hostile ended: $(cat "$(log_of "$1")")"
  fi
  wait "$srv" || st=$?
  by_itself "$st" || fail "$2: the rstream server ended with status $st (124: its timeout; 128+N: signal N): $(cat "$(log_of "$1")")"
  ! grep -q '^custom ' "$(log_of "$1")" || fail "$2: the rstream server completed its test: $(cat "$(log_of "$1")")"
  server_end="status $st, $(grep -v '^name' "$(log_of "$1")" | tail -1 | tr -s ' ')"
}
hostile_server hostile-srv1 7490
name=hostile-srv1 hport=7490
fg "$C" 40 "$hostile" "$SIP" "$hport" version
if ((rc == 0)); then
  grep -q "RDMA_CM_EVENT_REJECTED" <<<"$out" || fail "hostile version: $out"
  # (REJ 8, no listener for the service ID, would be no answer of the server's)
  ! grep -q "REJECTED (status 8)" <<<"$out" || fail "hostile version: rejected for want of a listener: $out"
  { kill -0 "$srv" 2>/dev/null && until_ok 25 listening "$S" "$hport"; } ||
    fail "hostile version: the server stopped listening after rejecting it: $(cat "$(log_of "$name")")"
  ok "hostile (a): ${out#hostile: }; the server still listens"
elif ((rc == 5)); then
  server_survives "$name" "hostile version (accepted)"
  echo "note: the server ACCEPTED conn data version 0x7f ($out); it ended by itself ($server_end); a new server for (b)"
  name=hostile-srv2 hport=7491
  hostile_server "$name" "$hport"
else
  fail "hostile version ($rc): $out; server: $(cat "$(log_of "$name")")"
fi
fg "$C" 40 "$hostile" "$SIP" "$hport" oversize
((rc == 0)) || fail "hostile oversize ($rc): $out; server: $(cat "$(log_of "$name")")"
server_survives "$name" "hostile oversize"
ok "hostile (b): ${out#hostile: }; the rstream server ended by itself: $server_end"
hostile_server hostile-srv3 7492
fg "$C" 40 "$hostile" "$SIP" 7492 flood
((rc == 0)) || fail "hostile flood ($rc): $out; server: $(cat "$(log_of hostile-srv3)")"
server_survives hostile-srv3 "hostile flood"
ok "hostile (c): ${out#hostile: }; the rstream server ended by itself: $server_end"
for h in "$S" "$C"; do
  kill -0 "$(cat "$OPENIB_SANDBOX/$h/ibd.pid")" 2>/dev/null || fail "ibd on $h is gone: $(tail -20 "$OPENIB_SANDBOX/$h/ibd.log")"
  "$ibdctl" --socket "$OPENIB_SANDBOX/$h/ibd.sock" devices >/dev/null || fail "ibd on $h does not answer"
  until_ok 50 no_qps "$h" || fail "$h's ibd still holds $(all_qps "$h") QPs of clients"
done
pair hostile-after 60 7495 "rstream -b $SIP -p 7495 -C 100 -S 4096 -T v" "rstream -s $SIP -p 7495 -C 100 -S 4096 -T v"
row=$(custom_row "$out" 4096 100) || fail "rstream after the hostile: no result row: $out"
ok "after the hostile peers: both ibds alive, no QP left in either, and a new rstream pair works: $row"

# ==== 7. datagram rsockets ==========================================================
# ib0_rx HOST: packets HOST's kernel received on ib0 (IPoIB: where its UDP
# goes; the sandbox's cables are UDP too, so not the Udp counters).
ib0_rx() { sb run "$1" cat /sys/class/net/ib0/statistics/rx_packets; }
# udpong's client ARGS: exit 0 and its custom row; the row in row.
udpong_client() {
  read -ra cargs <<<"$1"
  fg "$C" 60 stdbuf -oL udpong -s "$SIP" -p 7174 "${cargs[@]}"
  ((rc == 0)) || fail "udpong $1 ($rc): $out; server: $(cat "$(log_of udpong-srv)")"
  row=$(grep -E '^custom ' <<<"$out" | tr -s ' ') || fail "udpong $1: no result row: $out"
}
bg udpong-srv "$S" env "LD_LIBRARY_PATH=$libs" OPENIB_RSOCKET_DEBUG=1 stdbuf -oL udpong -b "$SIP" -p 7174
usrv=$bg
for args in "-C 2000 -S 1000 -T e" "-C 2000 -S 64 -T e -T b" "-C 2000 -S 1500 -T e -T a"; do
  udpong_client "$args"
  awk '$3 == "4k"' <<<"$row" | grep -q . || fail "udpong $args: not 4k transfers: $row"
  ok "udpong $args (echo): $row"
done
udpong_client "-C 20000 -S 1024"
n=$(awk '{print $3}' <<<"$row")
[[ $n != 0 ]] || fail "udpong one-way: the server counted nothing: $row"
ok "udpong -C 20000 -S 1024 (one way): the server counted $n ($row)"
before=$(ib0_rx "$S")
fg "$C" 120 "$dgram_check" "$SIP" 7174
((rc == 0)) || fail "rsocket_dgram_check ($rc): $out; server: $(tail -5 "$(log_of udpong-srv)")"
udp=$(($(ib0_rx "$S") - before))
((udp <= 40)) || fail "rsocket_dgram_check: $S's ib0 received $udp packets: the datagrams went over UDP, not as UD SENDs"
ok "${out#dgram-check: ok: }; $S's ib0 received $udp packets (the first exchange over UDP), the rest went as UD SENDs"
for mode in udp ud; do
  fg "$C" 60 "$dgram_hostile" "${ip[$C]}" "$SIP" 7174 "$mode"
  ((rc == 0)) || fail "rsocket_dgram_hostile $mode ($rc): $out; server: $(tail -5 "$(log_of udpong-srv)")"
  kill -0 "$usrv" 2>/dev/null || fail "hostile $mode: the udpong server is gone: $(tail -5 "$(log_of udpong-srv)")"
  ok "hostile datagrams ($mode): $(grep 'dgram-hostile' <<<"$out" | tail -1)"
done
drops=$(grep -o 'datagram dropped: [^(]*' "$(log_of udpong-srv)" | sort | uniq -c | sort -rn | tr -s ' ' | tr '\n' ';') || true
for why in "a UDP datagram without a valid header" "a UD message without a valid header"; do
  grep -q "datagram dropped: $why" "$(log_of udpong-srv)" ||
    fail "the hostile datagrams: the udpong server (OPENIB_RSOCKET_DEBUG=1) reported no drop of $why: $drops"
done
ok "the server's drops, by reason (the first 4 of each, then every 1024th): $drops"
udpong_client "-C 500 -S 512 -T e"
ok "after the hostile datagrams the udpong server still answers: $row"
kill -9 "$usrv"
wait "$usrv" 2>/dev/null || true
for h in "$S" "$C"; do
  kill -0 "$(cat "$OPENIB_SANDBOX/$h/ibd.pid")" 2>/dev/null || fail "ibd on $h is gone: $(tail -20 "$OPENIB_SANDBOX/$h/ibd.log")"
done
until_ok 50 gone "$S" "$usrv" || fail "udpong's server SIGKILLed: $S's ibd still holds $(objs "$S" "$usrv")"
until_ok 50 no_qps "$S" || fail "$S's ibd still holds $(all_qps "$S") QPs of clients"
ok "udpong's server SIGKILLed: $S's ibd holds nothing of it"

echo "PASS: rstream, riostream, rcopy, librspreload.so and udpong over our librdmacm.so.1; killed and hostile peers"
