#!/usr/bin/env bash
# Runs openib-simhca-demo with --pcap and decodes both captures with tshark:
# fails unless tshark decodes every frame without malformed packets or
# expert errors, and the BTH opcodes of every operation the demo does appear.
# Usage: capture_test.sh DEMO SIMHCA [--roce]. tshark is a prerequisite
# (setup.sh). With --roce the demo runs on Ethernet ports (docs/simhca.md
# §16) and the captures hold Ethernet frames, which must all be RoCEv2
# (UDP 4791) with the same opcodes.
set -euo pipefail
demo=$1 simhca=$2 roce=${3:-}
command -v tshark >/dev/null || { echo "FAIL: tshark not found (scripts/setup.sh installs it)"; exit 1; }
tmp=$(mktemp -d /tmp/openib-capture-test.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
"$demo" --simhca "$simhca" --pcap "$tmp/cap" ${roce:+--roce}
# Payload heuristics (RPC-over-RDMA, SMB Direct, ...) would read our
# arbitrary payloads as their protocols; switch them off (as test_pcap_erf.cpp).
heur=(--disable-heuristic rpcrdma_infiniband --disable-heuristic smb_direct_infiniband
      --disable-heuristic nvme_rdma --disable-heuristic iser_infiniband
      --disable-heuristic lnet_ib --disable-heuristic smcr_infiniband
      --disable-heuristic sdp_infiniband --disable-heuristic fc_infiniband
      --disable-heuristic mellanox_eoib --disable-heuristic eth_over_ib
      -o udp.ignore_ipv6_zero_checksum:TRUE)
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
  if [[ -n $roce ]]; then  # every frame RoCEv2: Ethernet, IPv4, UDP to 4791, a BTH
    tshark -n -r "$f" "${heur[@]}" -T fields -e frame.protocols -e udp.dstport >"$tmp/protos" 2>/dev/null
    bad=$(awk -F'\t' '$1 !~ /^eth:ethertype:ip:udp:infiniband/ || $2 != 4791' "$tmp/protos" | wc -l)
    echo "frames not RoCEv2 over IPv4: $bad"
    ((bad == 0)) || { echo "FAIL: frames other than RoCEv2 in $f:"; sort "$tmp/protos" | uniq -c | head; fail=1; }
  fi
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
