#!/usr/bin/env bash
# Runs every test: installs what is missing (Debian 12, as root), builds,
# then runs
#   1. the meson test suites of a normal build (unit, vfio-user
#      integration, and the real-kernel VFIO test in QEMU),
#   2. the same suites but QEMU and the Debian-tool ones (OpenSM,
#      infiniband-diags, the ABI check that loads Debian's ibstat) under
#      ASan + UBSan, built with clang (it compiles an instrumented build
#      in about half the time g++ takes, and adds its warnings),
#   3. each libFuzzer target for a bounded time (FUZZ_SECONDS, default 30),
#      two at a time.
# Ends with one line "N passed, N failed"; exits non-zero if anything failed.
set -uo pipefail
cd "$(dirname "$0")/.."
FUZZ_SECONDS=${FUZZ_SECONDS:-30}
# The test builds are compiled at -O1 (with debug info): it takes less
# than half the compile time of -O2, and nothing here measures speed
# (bench/ does, on its own -O2 build).
OPT=-Doptimization=1

bash scripts/setup.sh || exit 1

passed=0
failed=0
failures=()
flaky=()

# meson_suite DIR [meson test args...]: runs the tests and adds up the result.
meson_suite() {
  local dir=$1
  shift
  meson test -C "$dir" --print-errorlogs --num-processes 2 "$@"
  local rc=$? log=$dir/meson-logs/testlog.json
  if [[ ! -f $log ]]; then
    if ((rc)); then failed=$((failed + 1)); failures+=("$dir: meson test"); fi
    return
  fi
  local ok names n again=()
  ok=$(grep -c '"result": "OK"' "$log")
  passed=$((passed + ok))
  # Each failed test is named, its output was printed above, and it is run
  # once more: one that passes then is reported as FLAKY (counted passed),
  # one that fails twice is a failure.
  mapfile -t names < <(python3 scripts/failed_tests.py "$log")
  for n in "${names[@]}"; do
    echo "---- $dir: '$n' failed; rerunning it once"
    if meson test -C "$dir" --print-errorlogs "$@" "$n"; then
      flaky+=("$dir: $n")
      passed=$((passed + 1))
    else
      again+=("$n")
    fi
  done
  if ((${#again[@]})); then
    failed=$((failed + ${#again[@]}))
    failures+=("$dir: ${again[*]}")
  fi
}

step_build() {
  local dir=$1
  shift
  if ! bash scripts/build.sh "$dir" "$@"; then
    echo "test.sh: build of $dir failed" >&2
    failed=$((failed + 1))
    failures+=("build $dir")
    return 1
  fi
}

echo "== build (gcc, warnings as errors)"
step_build build $OPT && meson_suite build

echo "== ASan + UBSan"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
step_build build-asan $OPT -Db_sanitize=address,undefined -Db_lundef=false \
    --native-file scripts/clang.ini &&
  meson_suite build-asan --no-suite qemu --no-suite debian-tools

echo "== fuzz (${FUZZ_SECONDS}s per target)"
if BUILD_TARGETS=fuzz step_build build-fuzz $OPT -Dfuzz=true -Dtests=false \
    --native-file scripts/clang.ini; then
  # Two targets at a time (the machine's two cores), each for
  # FUZZ_SECONDS; results reported in the targets' order.
  fuzz_run() {  # TARGET: its exit status in build-fuzz/NAME.rc
    local name corpus
    name=$(basename "$1")
    corpus=build-fuzz/corpus/$name
    mkdir -p "$corpus"
    "$1" -max_total_time="$FUZZ_SECONDS" -print_final_stats=0 "$corpus" >"build-fuzz/$name.log" 2>&1
    echo $? >"build-fuzz/$name.rc"
  }
  targets=()
  for t in build-fuzz/test/fuzz/fuzz_*; do
    [[ -x $t && -f $t ]] && targets+=("$t")
  done
  for ((i = 0; i < ${#targets[@]}; i += 2)); do
    rm -f "build-fuzz/$(basename "${targets[i]}").rc"
    fuzz_run "${targets[i]}" &
    if ((i + 1 < ${#targets[@]})); then
      rm -f "build-fuzz/$(basename "${targets[i + 1]}").rc"
      fuzz_run "${targets[i + 1]}"
    fi
    wait
  done
  for t in "${targets[@]}"; do
    name=$(basename "$t")
    if [[ $(cat "build-fuzz/$name.rc" 2>/dev/null) == 0 ]]; then
      echo "fuzz $name: ok ($(grep -o 'Done [0-9]* runs' "build-fuzz/$name.log" | tail -1))"
      passed=$((passed + 1))
    else
      echo "fuzz $name: FAILED, see build-fuzz/$name.log"; tail -40 "build-fuzz/$name.log"
      failed=$((failed + 1))
      failures+=("fuzz $name")
    fi
  done
fi

echo
for f in "${flaky[@]}"; do echo "FLAKY (passed on rerun): $f"; done
for f in "${failures[@]}"; do echo "FAILED: $f"; done
echo "$passed passed, $failed failed"
((failed == 0))
