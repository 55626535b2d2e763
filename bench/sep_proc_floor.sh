#!/usr/bin/env bash
# The floor under a ping-pong between two client processes through two
# device processes (docs/performance.md "Separate processes"): a token
# passed along a chain of processes through shared memory, each one
# busy-polling its word and calling sched_yield() after N empty polls, as
# libopenib's Cq::poll and simhca's device loop do, and no other work.
# With 4 processes the token goes A -> B -> C -> D and back, the path of
# one ping-pong iteration (client B, simhca B, simhca A, client A; three
# hand-offs each way); with 2, one hand-off each way, as TCP's two ends.
# Also `perf bench sched pipe` (a wake-up per hand-off, no spinning) when
# perf is installed. Prints us per hand-off and per "half round trip".
#
#   bash bench/sep_proc_floor.sh [--iters N] [--yield-every N]
#
# Compiles its program with c++ into a temporary directory, removed on exit.
set -euo pipefail
iters=100000 yield=64
while [[ $# -gt 0 ]]; do
  [[ $# -ge 2 ]] || { echo "sep_proc_floor.sh: $1 needs a value" >&2; exit 2; }
  case $1 in
    --iters) iters=$2 ;;
    --yield-every) yield=$2 ;;
    *) echo "sep_proc_floor.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift 2
done
work=$(mktemp -d "${TMPDIR:-/tmp}/openib-floor-XXXXXX")
trap 'rm -rf "$work"' EXIT
cat >"$work/chain.cpp" <<'EOF'
// chain NPROCS ITERS YIELD_EVERY: a token along NPROCS processes and back.
#include <sched.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
struct alignas(64) Slot { std::atomic<unsigned long> v{0}; };
int main(int argc, char** argv) {
  const int n = std::atoi(argv[1]);
  const unsigned long iters = std::strtoul(argv[2], nullptr, 10);
  const unsigned yield = unsigned(std::atoi(argv[3]));
  // Slot i: the token's count for process i (forward and backward passes).
  auto* s = static_cast<Slot*>(mmap(nullptr, sizeof(Slot) * 8, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  auto wait_for = [&](int i, unsigned long want) {
    unsigned spins = 0;
    while (s[i].v.load(std::memory_order_acquire) < want)
      if (yield && ++spins % yield == 0) sched_yield();
  };
  // One iteration: 0 -> 1 -> ... -> n-1 -> n-2 -> ... -> 0. Process i
  // (0 < i < n-1) is passed the token twice per iteration.
  for (int i = 1; i < n; ++i) {
    if (fork() == 0) {
      const unsigned long per = (i == n - 1) ? 1 : 2;
      for (unsigned long k = 1; k <= iters; ++k) {
        wait_for(i, per * k - (per - 1));
        if (i == n - 1) { s[n - 2].v.fetch_add(1, std::memory_order_release); continue; }
        s[i + 1].v.fetch_add(1, std::memory_order_release);
        wait_for(i, per * k);
        s[i - 1].v.fetch_add(1, std::memory_order_release);
      }
      _exit(0);
    }
  }
  const auto t0 = std::chrono::steady_clock::now();
  for (unsigned long k = 1; k <= iters; ++k) {
    s[1].v.fetch_add(1, std::memory_order_release);
    wait_for(0, k);
  }
  const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  while (wait(nullptr) > 0) {}
  const double hops = 2.0 * (n - 1);
  std::printf("%d processes, yield every %u: %.2f us per iteration, %.2f us per hand-off, %.2f us per half round trip\n",
              n, yield, us / iters, us / iters / hops, us / iters / 2);
  return 0;
}
EOF
c++ -O2 -std=c++20 -o "$work/chain" "$work/chain.cpp"
echo "sep_proc_floor.sh: $(nproc) CPUs, load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
"$work/chain" 2 "$iters" "$yield"
"$work/chain" 4 "$iters" "$yield"
"$work/chain" 4 "$(( iters / 1000 > 50 ? iters / 1000 : 50 ))" 0  # no yield: a time slice per hand-off
if command -v perf >/dev/null; then
  perf bench sched pipe -l "$((iters / 2))" 2>/dev/null | awk '/usecs\/op/ {printf "perf bench sched pipe (2 processes, a wake-up per hand-off): %.2f us per hand-off\n", $1 / 2}'
fi
echo "sep_proc_floor.sh: load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
