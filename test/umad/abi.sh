#!/usr/bin/env bash
# The project's libibumad.so.3 exports exactly the versioned symbols of
# Debian's rdma-core libibumad.so.3 (IBUMAD_1.0 to 1.2), under the same
# soname, so that unmodified binaries bind to it through LD_LIBRARY_PATH.
#   abi.sh OUR_LIBIBUMAD_SO_3
set -euo pipefail
ours=$1
theirs=$(readlink -f /usr/lib/x86_64-linux-gnu/libibumad.so.3)
syms() { objdump -T "$1" | awk '/IBUMAD_/ && !/\*UND\*/ {print $(NF-1), $NF}' | sort; }
soname() { objdump -p "$1" | awk '$1 == "SONAME" {print $2}'; }
[[ $(soname "$ours") == "$(soname "$theirs")" ]] || {
  echo "FAIL: soname $(soname "$ours") != $(soname "$theirs")"; exit 1; }
if ! diff <(syms "$theirs") <(syms "$ours"); then
  echo "FAIL: versioned symbols differ (< Debian's, > ours)"; exit 1
fi
extra=$(objdump -T "$ours" | awk '!/\*UND\*/ && /DF|DO/ && !/IBUMAD_/ {print $NF}')
[[ -z $extra ]] || { echo "FAIL: unversioned exports: $extra"; exit 1; }
# A Debian binary linked against libibumad resolves every umad_ symbol here.
out=$(LD_LIBRARY_PATH=$(dirname "$ours") LD_BIND_NOW=1 ldd -r /usr/sbin/ibstat 2>&1) || true
if grep -q "undefined symbol" <<<"$out"; then echo "FAIL: $out"; exit 1; fi
grep -q "libibumad.so.3 => $(dirname "$ours")" <<<"$out" || {
  echo "FAIL: ibstat does not load ours: $out"; exit 1; }
echo "PASS: $(syms "$ours" | wc -l) versioned symbols as Debian's; ibstat binds to $(dirname "$ours")"
