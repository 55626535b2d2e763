#!/usr/bin/env bash
# The sandbox's addressing at scale (docs/operations.md "Sandbox"), without
# bringing a fabric up: `sandbox.sh plan` on fat trees from
# scripts/fattree.sh gives every host its own namespace and a distinct
# address inside the sandbox's network, and refuses what does not fit.
#   addresses.sh BUILD_DIR
set -euo pipefail
build=$(cd "$1" && pwd)
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/sandbox-addresses-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
export OPENIB_BUILD=$build
unset OPENIB_SANDBOX_NET OPENIB_SANDBOX_PREFIX
sandbox=$here/../../scripts/sandbox.sh
fattree=$here/../../scripts/fattree.sh
fail() { echo "FAIL: $*"; exit 1; }
ok() { echo "ok: $*"; }
# shellcheck disable=SC2086  # split at the dots
to_int() { local IFS=.; set -- $1; echo $((($1 << 24) | ($2 << 16) | ($3 << 8) | $4)); }

# --- fattree.sh: the 324-host tree is a valid topology --------------------
bash "$fattree" 18 18 9 >"$tmp/ft324" || fail "fattree.sh 18 18 9"
bind=$("$build/src/sim/fabric/ibfabric" --print-bindings "$tmp/ft324") || fail "ibfabric rejects the fat tree: $bind"
(($(wc -l <<<"$bind") == 324)) || fail "$(wc -l <<<"$bind") host ports cabled, expected 324"
(($(grep -c '^Switch' "$tmp/ft324") == 27)) || fail "$(grep -c '^Switch' "$tmp/ft324") switches, expected 27"
ok "fattree.sh 18 18 9: 324 hosts on 18 leaves, 9 spines; ibfabric reads it"
# The 1,008-host tree (bench/fattree_1008.sh): 8 up-links per leaf, one
# to each spine; it fits a /22 (the last host is 198.18.3.249).
bash "$fattree" 36 28 8 36 8 >"$tmp/ft1008" || fail "fattree.sh 36 28 8 36 8"
bind=$("$build/src/sim/fabric/ibfabric" --print-bindings "$tmp/ft1008") || fail "ibfabric rejects the 1,008-host tree"
(($(wc -l <<<"$bind") == 1008)) || fail "$(wc -l <<<"$bind") host ports cabled, expected 1008"
(($(grep -c '^Switch' "$tmp/ft1008") == 44)) || fail "$(grep -c '^Switch' "$tmp/ft1008") switches, expected 44"
grep -q '^\[36\] "Spine8"\[1\]$' "$tmp/ft1008" || fail "Leaf1's last up-link is not Spine8's port 1"
[[ $(bash "$sandbox" plan "$tmp/ft1008" | tail -1) == "Hca1008 sbx-1007 198.18.3.249" ]] ||
  fail "plan of 1,008 hosts: $(bash "$sandbox" plan "$tmp/ft1008" | tail -1)"
ok "fattree.sh 36 28 8 36 8: 1,008 hosts on 36 leaves with 8 up-links, 8 spines; ibfabric reads it; a /22 holds it"
for bad in "19 18 9" "18 18 7" "2 20 2" "36 28 8 36 9" "37 28 8 36 8" "2 16 4 36 6"; do
  # shellcheck disable=SC2086
  if out=$(bash "$fattree" $bad 2>&1); then fail "fattree.sh $bad was accepted"; fi
  grep -q "fattree:" <<<"$out" || fail "fattree.sh $bad: $out"
done
ok "fattree.sh refuses trees its switches cannot hold"

# --- 324 hosts, default network: distinct, valid, in 198.18.0.0/22 --------
plan=$(bash "$sandbox" plan "$tmp/ft324") || fail "plan: $plan"
(($(wc -l <<<"$plan") == 324)) || fail "plan has $(wc -l <<<"$plan") hosts"
(($(awk '{print $1}' <<<"$plan" | sort -u | wc -l) == 324)) || fail "host names repeat"
(($(awk '{print $2}' <<<"$plan" | sort -u | wc -l) == 324)) || fail "namespaces repeat"
(($(awk '{print $3}' <<<"$plan" | sort -u | wc -l) == 324)) || fail "addresses repeat"
lo=$(to_int 198.18.0.0)
while read -r name _ addr; do
  [[ $addr =~ ^[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+$ ]] || fail "$name: '$addr' is not an address"
  for o in ${addr//./ }; do ((o <= 255)) || fail "$name: '$addr' is not an address"; done
  a=$(to_int "$addr")
  # Inside the /22, neither its network, the bridge (.1) nor its broadcast.
  ((a > lo + 1 && a < lo + 1023)) || fail "$name: $addr is not a host address of 198.18.0.0/22"
done <<<"$plan"
grep -q "^Hca246 sbx-245 198.18.0.255$" <<<"$plan" && grep -q "^Hca324 sbx-323 198.18.1.77$" <<<"$plan" ||
  fail "plan: $(sed -n '246p;324p' <<<"$plan")"
ok "324 hosts: distinct names, namespaces and addresses in 198.18.0.0/22 (the 246th is 198.18.0.255)"

# --- another network; one that is too small, or not ours ------------------
plan=$(OPENIB_SANDBOX_NET=198.19.4.0/22 OPENIB_SANDBOX_PREFIX=sbq bash "$sandbox" plan "$tmp/ft324") || fail "plan: $plan"
[[ $(head -1 <<<"$plan") == "Hca1 sbq-0 198.19.4.10" && $(tail -1 <<<"$plan") == "Hca324 sbq-323 198.19.5.77" ]] ||
  fail "198.19.4.0/22: $(sed -n '1p;$p' <<<"$plan")"
ok "OPENIB_SANDBOX_NET=198.19.4.0/22, prefix sbq: Hca1 198.19.4.10 .. Hca324 198.19.5.77"
bash "$fattree" 2 16 2 >"$tmp/ft32"
plan=$(OPENIB_SANDBOX_NET=198.18.7 bash "$sandbox" plan "$tmp/ft32") || fail "plan in 198.18.7: $plan"
[[ $(tail -1 <<<"$plan") == "Hca32 sbx-31 198.18.7.41" ]] || fail "198.18.7: $(tail -1 <<<"$plan")"
ok "OPENIB_SANDBOX_NET=198.18.7 (a /24, as the subnet test sets it): Hca32 198.18.7.41"
expect_refused() {  # NET TOPOLOGY WORDS
  local out
  if out=$(OPENIB_SANDBOX_NET=$1 bash "$sandbox" plan "$2" 2>&1); then fail "NET $1 accepted: $out"; fi
  grep -q "$3" <<<"$out" || fail "NET $1: '$out' does not say '$3'"
}
expect_refused 198.18.7 "$tmp/ft324" "324 hosts do not fit"
expect_refused 198.18.0.0/24 "$tmp/ft324" "324 hosts do not fit"
expect_refused 10.0.0.0/22 "$tmp/ft32" "not inside 198.18.0.0/15"
expect_refused 198.20.0.0/16 "$tmp/ft32" "not inside 198.18.0.0/15"
expect_refused 198.18.1.0/22 "$tmp/ft32" "host bits set"
expect_refused 198.18.0.0/8 "$tmp/ft32" "not in 16..28"
expect_refused 198.18.300 "$tmp/ft32" "not an IPv4 address"
expect_refused nonsense "$tmp/ft32" "neither"
ok "refused: 324 hosts in a /24, networks outside 198.18.0.0/15, unaligned, bad lengths and spellings"
echo "PASS: sandbox addressing"
