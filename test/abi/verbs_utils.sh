#!/usr/bin/env bash
# Debian's unmodified ibverbs-utils and perftest over our libibverbs.so.1
# (docs/library.md "Verbs ABI"), between two ibds on this host, each with
# its embedded simhca, cabled back to back over UDP on 127.0.0.1 (test
# verbs-utils, suites abi and debian-tools):
#  - verbs_calls (verbs_calls.c) against ibd A;
#  - verbs_calls --loop KIND against ibd B, SIGKILLed in the middle of its
#    pd, mr, cq, channel, qp, srq, ah calls and of posting: ibd keeps
#    nothing of it;
#  - ibv_devices lists ibd A's device with its node GUID; ibv_devinfo -v
#    shows the fields ibdctl shows (firmware, GUIDs, limits, port state,
#    LID, MTU, port GUID in GID 0);
#  - ibv_rc_pingpong, ibv_uc_pingpong, ibv_ud_pingpong, ibv_srq_pingpong,
#    each with the data checked (-c), busy-polling and with completion
#    events (-e); one run with the client as user nobody (a local user
#    through the 0666 socket);
#  - perftest's ib_write_bw (also -a: every size), ib_write_lat, ib_read_bw,
#    ib_read_lat, ib_send_bw, ib_send_lat, ib_atomic_bw, ib_atomic_lat with
#    a small -n: both ends exit 0 and print their results line;
#  - ib_write_bw and ib_send_bw --use_hugepages: their buffers are SysV
#    SHM_HUGETLB segments, shared hugetlb memory that ibd maps from its file
#    (MAP_MEM_SHARED; /proc/sys/vm/nr_hugepages raised for it, put back).
# Servers run on ibd A, clients on ibd B; both sides must exit 0.
#   verbs_utils.sh IBD IBDCTL ABI_DIR VERBS_CALLS
set -euo pipefail
IBD=$1 IBDCTL=$2 ABI=$3 CALLS=$4
work=$(mktemp -d "${TMPDIR:-/tmp}/verbs-utils-XXXXXX")
chmod 755 "$work"
# shellcheck source=../../scripts/ibd_pair.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/ibd_pair.sh"
# shellcheck source=../../scripts/unprivileged.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/unprivileged.sh"
hp_before=''
cleanup() {
  stop_daemons
  [[ -z $hp_before ]] || echo "$hp_before" >/proc/sys/vm/nr_hugepages
  rm -rf "$work"
}
trap cleanup EXIT
hp_diag=''
fail() {
  echo "FAIL: $*"
  if [[ -n $hp_diag ]]; then
    grep -i huge /proc/meminfo
    echo "--- ibd a (tail)"; tail -20 "$work/a.log"
    echo "--- ibd b (tail)"; tail -20 "$work/b.log"
  fi
  exit 1
}

pa=$(free_port)
pb=$pa
while ((pb == pa)); do pb=$(free_port); done
PID_A='' PID_B=''
start_ibd a 1 "$pa" "$pb" PID_A --socket-mode 0666
start_ibd b 2 "$pb" "$pa" PID_B --socket-mode 0666
SA=$work/a.sock SB=$work/b.sock
# Our libraries where user nobody can read them too.
mkdir -m 755 "$work/lib"
cp -L "$ABI"/libibverbs.so.1 "$ABI"/libmlx5.so.1 "$ABI"/libefa.so.1 "$ABI"/../lib/libopenib.so.0 "$work/lib/"
chmod 644 "$work"/lib/*
export LD_LIBRARY_PATH=$work/lib

# ---- verbs_calls.c: layouts, inline paths, hostile calls -------------------------
OPENIB_SOCKET=$SA timeout 60 "$CALLS" || fail "verbs_calls"

# ---- a client SIGKILLed in the middle of each kind of call ------------------------
# verbs_calls --loop KIND makes and destroys objects of one kind (or posts
# and polls) as fast as it can; killed 0.3, 0.5 and 0.7 s after it starts
# looping it is almost
# surely inside a call, with a request on its way to ibd or a reply not yet
# read. ibd must forget the client and everything it made: no client with
# its pid, and no object left in any client (ibdctl's own connection has
# none).
leftovers() { # PID: prints what ibd B still holds of PID (nothing: empty)
  "$IBDCTL" --socket "$SB" --json clients | python3 -c '
import json, sys
pid = int(sys.argv[1])
j = json.load(sys.stdin)
for c in j.get("clients", []):
    held = {k: v for k, v in c.items() if k in ("pds", "mrs", "cqs", "qps", "srqs", "ahs", "mems") and v}
    if c.get("pid") == pid or held:
        print(c)' "$1"
}
for kind in pd mr cq channel qp srq ah post; do
  for at in 0.3 0.5 0.7; do
    OPENIB_SOCKET=$SB "$CALLS" --loop "$kind" >"$work/loop.log" 2>&1 &
    lp=$!
    for ((i = 0; i < 100; i++)); do
      grep -q "looping: $kind" "$work/loop.log" && break
      sleep 0.1
    done
    sleep "$at"
    # (The check can see a client: the live one is listed.)
    [[ -n $(leftovers "$lp") ]] || fail "ibdctl clients does not list the live verbs_calls --loop $kind ($lp)"
    kill -KILL "$lp"
    wait "$lp" 2>/dev/null || true
    grep -q "looping: $kind" "$work/loop.log" || fail "verbs_calls --loop $kind did not start: $(cat "$work/loop.log")"
    left=x
    for ((i = 0; i < 50; i++)); do
      left=$(leftovers "$lp") || fail "ibdctl clients on ibd B"
      [[ -z $left ]] && break
      sleep 0.1
    done
    [[ -z $left ]] || fail "a client killed at $at s while looping over $kind left in ibd: $left"
  done
  echo "ok: a client SIGKILLed in the middle of $kind calls (3 times) leaves nothing in ibd"
done

# ---- ibv_devices, ibv_devinfo -v against ibdctl -----------------------------------
out=$(OPENIB_SOCKET=$SA timeout 30 ibv_devices) || fail "ibv_devices: $out"
dev=$("$IBDCTL" --socket "$SA" ports >/dev/null; "$IBDCTL" --socket "$SA" devices | awk '$1 == "name" {print $2}')
guid=$("$IBDCTL" --socket "$SA" devices | awk '$1 == "node_guid" {sub(/^0x/, "", $2); print $2}')
grep -Eq "^[[:space:]]+$dev[[:space:]]+$guid\$" <<<"$out" || fail "ibv_devices does not list $dev $guid: $out"
echo "ok: ibv_devices lists $dev, node GUID $guid"
info=$(OPENIB_SOCKET=$SA timeout 30 ibv_devinfo -v) || fail "ibv_devinfo -v: $info"
# ibv_devinfo's value of FIELD (the first, or the port's)
dv() { awk -v k="$1:" '$1 == k {print $2; exit}' <<<"$info"; }
ctl() { "$IBDCTL" --socket "$SA" devices | awk -v k="$1" '$1 == k {print $2}'; }
port() { "$IBDCTL" --socket "$SA" ports | awk -v c="$1" 'NR == 1 {for (i = 1; i <= NF; i++) if ($i == c) n = i} NR == 2 {print $n}'; }
hex_guid() { sed 's/^0x//; s/\(....\)\(....\)\(....\)\(....\)/\1:\2:\3:\4/' <<<"$1"; }
check() {  # NAME EXPECTED ACTUAL
  [[ $2 == "$3" ]] || fail "ibv_devinfo -v: $1 is '$3', ibdctl says '$2'"
}
check hca_id "$dev" "$(dv hca_id)"
check fw_ver "$(ctl fw_rev)" "$(dv fw_ver)"
check node_guid "$(hex_guid "$(ctl node_guid)")" "$(dv node_guid)"
check phys_port_cnt "$(ctl num_ports)" "$(dv phys_port_cnt)"
for f in max_qp max_cq max_mr max_pd max_srq max_ah; do check "$f" "$(ctl "$f")" "$(dv "$f")"; done
check max_qp_wr "$((1 << $(ctl log_max_qp_wr)))" "$(dv max_qp_wr)"
check max_cqe "$((1 << $(ctl log_max_cqe)))" "$(dv max_cqe)"
check state "$(port STATE_NAME)" "$(dv state | sed 's/^PORT_//')"
check port_lid "$(port LID)" "$(dv port_lid)"
check sm_lid "$(port SM_LID)" "$(dv sm_lid)"
check active_mtu "($(port ACTIVE_MTU))" "$(awk '$1 == "active_mtu:" {print $3; exit}' <<<"$info")"
pguid=$(port PORT_GUID)
grep -q "GID\[  0\]:.*fe80:0000:0000:0000:$(hex_guid "$pguid")" <<<"$info" ||
  grep -q "GID\[  0\]:.*fe80::$(hex_guid "$pguid" | sed 's/^0*//; s/:0*\([0-9a-f]\)/:\1/g')" <<<"$info" ||
  fail "ibv_devinfo -v: GID 0 is not fe80::$pguid: $(grep 'GID\[' <<<"$info")"
echo "ok: ibv_devinfo -v shows ibdctl's firmware, GUIDs, limits, port state, LIDs, MTU and GID 0"

# ---- the ping-pongs and perftest ---------------------------------------------------
# shellcheck source=run_pair.sh
source "$(dirname "${BASH_SOURCE[0]}")/run_pair.sh"
# pp [--nobody] PROG ARGS...: a ping-pong; both print their "iters in" line.
pp() {
  run_pair 60 "$@"
  grep -q "iters in" "$work/cli.log" && grep -q "iters in" "$work/srv.log" ||
    fail "$*: no result line: $(cat "$work/srv.log" "$work/cli.log")"
  echo "ok: $*: $(grep 'iters in' "$work/cli.log")"
}
for prog in ibv_rc_pingpong ibv_uc_pingpong ibv_srq_pingpong; do
  pp "$prog" -c -n 100 -s 4096
  pp "$prog" -c -n 100 -s 4096 -e
done
pp ibv_ud_pingpong -c -n 100 -s 1024
pp ibv_ud_pingpong -c -n 100 -s 1024 -e
pp --nobody ibv_rc_pingpong -c -n 100 -s 8192

# pt PROG ARGS...: perftest; the client prints a results row (a line that
# starts with the message size and the iterations).
pt() {
  run_pair 120 "$@"
  local rows
  rows=$(grep -cE '^ *[0-9]+ +[0-9]+ ' "$work/cli.log" || true)
  ((rows >= 1)) || fail "$*: no results row: $(cat "$work/cli.log")"
  echo "ok: $* ($rows rows): $(grep -E '^ *[0-9]+ +[0-9]+ ' "$work/cli.log" | tail -1 | tr -s ' \t' ' ')"
}
for t in ib_write_bw ib_read_bw ib_send_bw ib_atomic_bw; do pt "$t" -d "$dev" -n 200; done
for t in ib_write_lat ib_read_lat ib_send_lat ib_atomic_lat; do pt "$t" -d "$dev" -n 200; done
pt ib_write_bw -d "$dev" -a -n 50
rows=$(grep -cE '^ *[0-9]+ +[0-9]+ ' "$work/cli.log")
((rows == 23)) || fail "ib_write_bw -a: $rows sizes, not 2 B to 8 MiB (23): $(cat "$work/cli.log")"
# Hugetlb buffers (docs/library.md "Shared memory"); one test at a time
# changes the count of huge pages (test/ibd/test_api_mr_shared.cpp too).
exec {hp_lock}>/tmp/openib-test-hugepages.lock
flock "$hp_lock"
hp_before=$(cat /proc/sys/vm/nr_hugepages)
echo $((hp_before + 32)) >/proc/sys/vm/nr_hugepages
# (OPENIB_LOG=debug: a refused registration says why in the output a
# failure prints; fail() adds the huge-page counts and both ibds' logs.)
hp_diag=1
for t in ib_write_bw ib_send_bw; do
  OPENIB_LOG=debug pt "$t" -d "$dev" -n 200 --use_hugepages
  grep -q "Failed to allocate hugepages" "$work/srv.log" "$work/cli.log" && fail "$t --use_hugepages: no huge pages"
done
hp_diag=
echo "$hp_before" >/proc/sys/vm/nr_hugepages
hp_before=''
flock -u "$hp_lock"
echo "PASS: ibverbs-utils and perftest over our libibverbs.so.1 between two ibds"
