// The simhca provider's doorbells (providers/simhca.cpp): everything the
// library stores into its UAR page and its doorbell records for a simhca
// device, in one place (docs/simhca.md §4, §7.3, §12.3, §12.5).
//
// The UAR page is the client's own 4 KiB (a sealed memfd of that page alone,
// docs/simhca.md §4), mmap-ed from the fd ibd handed over at HELLO.
// Registers are little-endian and the doorbells 64 bits wide, written with
// one aligned 8-byte store (§1). A store through the mapping is not
// trapped: the device's doorbell scanner (§12.5.1) notices it, and when
// idle sleeps on the page's SCANNER_SLEEPING word. The wake-up protocol
// (§12.5.2, Dekker with the scanner): store the doorbell, full fence, read
// SCANNER_SLEEPING; only if it is set, exchange it with 0 and, if that
// returned non-zero, FUTEX_WAKE it (a shared futex: the scanner waits on
// the same page from another process).
// That futex call is the data path's only system call, and only after the
// device went idle.
#pragma once

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "common/byte_order.hpp"
#include "prm/uar.hpp"

namespace openib::lib {

// A counter into a doorbell record (§12.3: big-endian u32 at dp::kDbr*),
// after (release) the WQEs it publishes: one atomic 4-byte store of the
// big-endian bytes (bytes::st_be32 lays them out; the device reads the
// record from another process, so the store itself stays atomic).
inline void dbr_store(std::byte* rec, size_t off, uint32_t counter) {
  uint32_t be;
  bytes::st_be32(&be, counter);
  std::atomic_ref<uint32_t>(*reinterpret_cast<uint32_t*>(rec + off)).store(be, std::memory_order_release);
}

class Uar {
 public:
  Uar() = default;
  explicit Uar(std::byte* page) : page_(page) {}
  std::byte* page() const { return page_; }

  // §12.5 SQ_DOORBELL with the SQ producer counter.
  void ring_sq(uint32_t qpn, uint32_t producer) {
    store64(dp::kUarSqDoorbell, dp::sq_doorbell(qpn, producer));
    wake_scanner();
  }
  // §7.3 CQ_ARM with the consumer counter (after the arm into the CQ's
  // record, dbr_store(dp::kDbrCqArm), §12.5.1).
  void arm_cq(uint32_t cqn, dp::CqArm cmd, uint32_t arm_sn, uint32_t consumer) {
    store64(dp::kUarCqArm, dp::cq_arm(cqn, cmd, arm_sn, consumer));
    wake_scanner();
  }

 private:
  // One aligned 8-byte store (§1), little-endian register (host order on
  // x86: common/byte_order.hpp asserts a little-endian host).
  void store64(size_t off, uint64_t v) {
    std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(page_ + off))
        .store(v, std::memory_order_release);
  }
  // §12.5.2 notification suppression, client steps 5-6: the device only
  // needs a wake-up when its scanner published SCANNER_SLEEPING. The fence
  // orders our doorbell store before that load (the scanner does the mirror
  // image). Clearing the word first closes the window in which the scanner
  // re-checked but has not entered futex_waitv yet, and lets only one of
  // several ringing threads make the system call.
  void wake_scanner() {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    auto* w = reinterpret_cast<uint32_t*>(page_ + dp::kUarScannerSleeping);
    std::atomic_ref<uint32_t> sleeping(*w);
    if (sleeping.load(std::memory_order_relaxed) != 0 && sleeping.exchange(0, std::memory_order_seq_cst) != 0)
      ::syscall(SYS_futex, w, FUTEX_WAKE, 1, nullptr, nullptr, 0);  // shared: no FUTEX_PRIVATE_FLAG
  }

  std::byte* page_ = nullptr;
};

}  // namespace openib::lib
