#!/usr/bin/env bash
# Our libibverbs.so.1 (src/abi/verbs, docs/library.md "Verbs ABI") has the
# soname, version nodes (with their parents) and versioned symbols of
# Debian's rdma-core 44 one, the hidden NAME@IBVERBS_1.0 compat twins
# included, exports nothing else, and Debian's binaries that use libibverbs
# (ibverbs-utils, perftest, rdmacm-utils, qperf) resolve every ibv_ import
# from it through LD_LIBRARY_PATH.
#   verbs_abi.sh OUR_LIBIBVERBS_SO_1
set -euo pipefail
ours=$1
dir=$(dirname "$ours")
theirs=$(readlink -f /usr/lib/x86_64-linux-gnu/libibverbs.so.1)
# Binding, type, version and name of each defined symbol of an IBVERBS_ node
# (a hidden version is shown in parentheses).
syms() { objdump -T "$1" | awk '/IBVERBS_/ && !/\*UND\*/ {print $2, $3, $(NF-1), $NF}' | sort; }
vdefs() { readelf -V "$1" | sed -n '/^Version definition/,/^Version needs/p' | grep -o 'Name: .*\|Parent 1: .*'; }
soname() { objdump -p "$1" | awk '$1 == "SONAME" {print $2}'; }
[[ $(soname "$ours") == libibverbs.so.1 && $(soname "$theirs") == libibverbs.so.1 ]] || {
  echo "FAIL: soname $(soname "$ours"), Debian's $(soname "$theirs")"; exit 1; }
if ! diff <(vdefs "$theirs") <(vdefs "$ours"); then
  echo "FAIL: version definitions differ (< Debian's, > ours)"; exit 1
fi
if ! diff <(syms "$theirs") <(syms "$ours"); then
  echo "FAIL: versioned symbols differ (< Debian's, > ours)"; exit 1
fi
extra=$(objdump -T "$ours" | awk '!/\*UND\*/ && /DF|DO/ && !/IBVERBS_/ {print $NF}')
[[ -z $extra ]] || { echo "FAIL: unversioned exports: $extra"; exit 1; }
hidden=$(syms "$ours" | grep -c '(IBVERBS_')
# Each Debian binary that needs libibverbs binds to ours with every ibv_
# symbol found at its version (librdmacm's are Debian's until ours exists).
bins=0
for pkg in ibverbs-utils perftest rdmacm-utils qperf; do
  for bin in $(dpkg -L "$pkg" | grep '^/usr/bin/'); do
    # (grep without -q: it reads all, objdump never gets SIGPIPE under pipefail)
    objdump -p "$bin" 2>/dev/null | grep 'NEEDED *libibverbs\.so\.1' >/dev/null || continue
    out=$(LD_LIBRARY_PATH=$dir LD_BIND_NOW=1 ldd -r "$bin" 2>&1) || true
    if grep -E "undefined symbol: _?ibv_|IBVERBS_[0-9A-Z_.]+' not found" <<<"$out"; then
      echo "FAIL: $bin: $out"; exit 1
    fi
    grep -q "libibverbs.so.1 => $dir/libibverbs.so.1 " <<<"$out" || {
      echo "FAIL: $bin does not load our libibverbs.so.1: $out"; exit 1; }
    bins=$((bins + 1))
  done
done
((bins >= 20)) || { echo "FAIL: only $bins Debian binaries linked against libibverbs"; exit 1; }
echo "PASS: $(syms "$ours" | wc -l) versioned symbols ($hidden hidden compat twins) in $(vdefs "$ours" | grep -c 'Name: IBVERBS_') versions, as Debian's; $bins Debian binaries bind to $dir"
