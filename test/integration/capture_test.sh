#!/usr/bin/env bash
# Runs openib-simhca-demo with --pcap and decodes both captures with tshark:
# fails unless tshark decodes every frame without malformed packets or
# expert errors, and the BTH opcodes of every operation the demo does appear.
# Usage: capture_test.sh DEMO SIMHCA. tshark is a prerequisite (setup.sh).
set -euo pipefail
demo=$1 simhca=$2
command -v tshark >/dev/null || { echo "FAIL: tshark not found (scripts/setup.sh installs it)"; exit 1; }
tmp=$(mktemp -d /tmp/openib-capture-test.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
"$demo" --simhca "$simhca" --pcap "$tmp/cap"
# Payload heuristics (RPC-over-RDMA, SMB Direct, ...) would read our
# arbitrary payloads as their protocols; switch them off (as test_pcap_erf.cpp).
heur=(--disable-heuristic rpcrdma_infiniband --disable-heuristic smb_direct_infiniband
      --disable-heuristic nvme_rdma --disable-heuristic iser_infiniband
      --disable-heuristic lnet_ib --disable-heuristic smcr_infiniband
      --disable-heuristic sdp_infiniband --disable-heuristic fc_infiniband
      --disable-heuristic mellanox_eoib --disable-heuristic eth_over_ib)
fail=0
: >"$tmp/opcodes"
for f in "$tmp"/cap.hca1 "$tmp"/cap.hca2; do
  echo "== $(basename "$f")"
  tshark -n -r "$f" "${heur[@]}" -T fields -e infiniband.bth.opcode -e _ws.malformed >"$tmp/fields" 2>"$tmp/err" ||
    { echo "FAIL: tshark exited non-zero on $f"; cat "$tmp/err"; fail=1; }
  echo "frames: $(wc -l <"$tmp/fields")"
  if awk -F'\t' '$2 != ""' "$tmp/fields" | grep -q .; then echo "FAIL: malformed frames in $f"; fail=1; fi
  tshark -n -r "$f" "${heur[@]}" -V 2>/dev/null | grep -q Malformed && { echo "FAIL: Malformed in -V of $f"; fail=1; }
  expert=$(tshark -n -r "$f" "${heur[@]}" -q -z expert 2>&1) || { echo "FAIL: tshark -z expert failed"; fail=1; }
  if grep -q "Errors (" <<<"$expert"; then echo "FAIL: expert errors in $f:"; echo "$expert"; fail=1; fi
  cut -f1 "$tmp/fields" >>"$tmp/opcodes"
done
echo "== BTH opcode histogram (both captures): count opcode"
sort -n "$tmp/opcodes" | uniq -c
have() { grep -qx "$1" "$tmp/opcodes"; }
if ! have 4 && ! { have 0 && have 2; }; then echo "FAIL: no RC SEND Only (4) nor SEND First/Last (0, 2)"; fail=1; fi
for op in 6 7 8 12 13 14 15 17 18 19 20 100; do
  have "$op" || { echo "FAIL: BTH opcode $op not seen"; fail=1; }
done
((fail == 0)) && echo "capture test: ok"
exit "$fail"
