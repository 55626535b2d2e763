// simhca's resource tables (docs/simhca.md §6, §7): one bounded table per
// object kind, numbers allocated round-robin (§6: a freed number is not
// reused at once), and the reference counts that make a destroy
// RESOURCE_BUSY while something still uses the object.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <vector>

#include "sim/simhca/codec.hpp"
#include "sim/wire/packet.hpp"
#include "sim/simhca/wqe.hpp"

namespace openib::simhca {

template <typename T>
class Table {
 public:
  // Numbers [first, capacity) are allocated by alloc(); numbers below
  // `first` only by alloc_at() (QP0 and QP1).
  void reset(uint32_t capacity, uint32_t first = 0) {
    slots_.clear();
    slots_.resize(capacity);
    used_.assign((capacity + 63) / 64, 0);
    first_ = first;
    cursor_ = first;
    count_ = 0;
  }
  std::optional<uint32_t> alloc(T v) {
    const uint32_t n = static_cast<uint32_t>(slots_.size());
    if (n <= first_) return std::nullopt;
    for (uint32_t i = 0; i < n - first_; ++i) {
      uint32_t k = first_ + (cursor_ - first_ + i) % (n - first_);
      if (!slots_[k]) {
        slots_[k] = std::make_unique<T>(std::move(v));
        mark(k, true);
        cursor_ = k + 1 < n ? k + 1 : first_;
        ++count_;
        return k;
      }
    }
    return std::nullopt;
  }
  bool alloc_at(uint32_t k, T v) {
    if (k >= slots_.size() || slots_[k]) return false;
    slots_[k] = std::make_unique<T>(std::move(v));
    mark(k, true);
    ++count_;
    return true;
  }
  T* get(uint32_t k) { return k < slots_.size() ? slots_[k].get() : nullptr; }
  const T* get(uint32_t k) const { return k < slots_.size() ? slots_[k].get() : nullptr; }
  void free(uint32_t k) {
    if (get(k)) {
      slots_[k].reset();
      mark(k, false);
      --count_;
    }
  }
  uint32_t count() const { return count_; }
  bool has_free() const {
    for (size_t k = first_; k < slots_.size(); ++k)
      if (!slots_[k]) return true;
    return false;
  }
  // In increasing number, over the occupied slots only (the data path
  // walks the QP table on every turn of the device loop: 16384 slots).
  // f may free the object it is given.
  template <typename F>
  void for_each(F&& f) { each(*this, f); }
  template <typename F>
  void for_each(F&& f) const { each(*this, f); }

 private:
  template <typename Self, typename F>
  static void each(Self& self, F& f) {
    for (uint32_t w = 0; w < self.used_.size(); ++w)
      for (uint64_t bits = self.used_[w]; bits; bits &= bits - 1) {
        const uint32_t k = w * 64 + static_cast<uint32_t>(__builtin_ctzll(bits));
        if (self.slots_[k]) f(k, *self.slots_[k]);
      }
  }
  void mark(uint32_t k, bool on) {
    const uint64_t bit = uint64_t{1} << (k % 64);
    used_[k / 64] = on ? used_[k / 64] | bit : used_[k / 64] & ~bit;
  }

  // An object each, allocated when its number is: a table of empty slots
  // costs a pointer per number (the QP table's 16384 inline Qps were 8 MB
  // per simhca, docs/performance.md "Scale: the sandbox").
  std::vector<std::unique_ptr<T>> slots_;
  std::vector<uint64_t> used_;  // bit k: slots_[k] is occupied
  uint32_t first_ = 0, cursor_ = 0, count_ = 0;
};

// A set of small numbers as a two-level bitmap: a word of bits per 64
// numbers, and a summary bit per word that is not 0, so that for_each()
// reads only the words with members (a few, out of 256 for 16384 QPs).
class SparseBitSet {
 public:
  void reset(uint32_t capacity) {
    bits_.assign((capacity + 63) / 64, 0);
    summary_.assign((bits_.size() + 63) / 64, 0);
  }
  void set(uint32_t k, bool on) {
    const size_t w = k / 64;
    if (w >= bits_.size()) return;
    const uint64_t bit = uint64_t{1} << (k % 64), wbit = uint64_t{1} << (w % 64);
    bits_[w] = on ? bits_[w] | bit : bits_[w] & ~bit;
    summary_[w / 64] = bits_[w] ? summary_[w / 64] | wbit : summary_[w / 64] & ~wbit;
  }
  // In increasing order; f may change the set (each word is read once).
  template <typename F>
  void for_each(F&& f) const {
    for (size_t s = 0; s < summary_.size(); ++s)
      for (uint64_t words = summary_[s]; words; words &= words - 1) {
        const size_t w = s * 64 + static_cast<size_t>(__builtin_ctzll(words));
        for (uint64_t bits = bits_[w]; bits; bits &= bits - 1)
          f(static_cast<uint32_t>(w * 64 + static_cast<size_t>(__builtin_ctzll(bits))));
      }
  }

 private:
  std::vector<uint64_t> bits_, summary_;
};

struct Pd {
  uint32_t users = 0;  // QPs, SRQs, MKEYs, AHs
};

inline constexpr uint32_t kNoQp = 0xffffffff;

struct Uar {
  uint32_t users = 0;           // EQs, CQs, SRQs, QPs
  uint32_t doorbell_users = 0;  // EQs, CQs, QPs: the scanner watches the page (§12.5)
  uint32_t first_qp = kNoQp;    // the QPs of this UAR, linked through Qp::uar_next
  uint32_t first_cq = kNoQp;    // the CQs of this UAR, linked through Cq::uar_next (§12.5.1 CQ_ARM)
  UarWords taken{};             // §12.5: the doorbell words last taken
};

// §7.1
struct Eq {
  CreateEq cfg;
  bool armed = true;  // §6.4: created armed
  uint32_t producer = 0, consumer = 0, overruns = 0, write_faults = 0;
  uint32_t users = 0;  // CQs
};

// §7.2
struct Cq {
  CreateCq cfg;
  uint8_t arm = 0, state = 0, arm_sn = 0;
  bool arm_sn_from_record = false;  // arm_sn was taken from the doorbell record (§7.3)
  uint32_t producer = 0, consumer = 0;
  uint32_t uar_prev = kNoQp, uar_next = kNoQp;  // the CQs of cfg.uar (§12.5.1)
  uint32_t users = 0;  // QP references (send and receive count separately)
};

// §7.4
struct Srq {
  CreateSrq cfg;
  uint8_t state = 0;
  uint32_t users = 0;  // QPs
  uint32_t ci = 0;     // §12.3: receive WQEs consumed (data path)
};

// §7.5
struct Mkey {
  CreateMkey cfg;
  uint32_t key = 0;
};

struct Ah {
  uint32_t pdn = 0;
  Av av;
};

// ---- data path state of a QP (§12; IBA 9.7 requester and responder) ----

using DpClock = std::chrono::steady_clock;

// A send WQE taken from the SQ and not yet completed (RC: until acknowledged).
struct SendOp {
  SendWqe w;
  uint16_t wqe_index = 0;
  uint64_t len = 0;
  uint32_t first_psn = 0, npkts = 1;
  uint32_t sent = 0;   // packets sent in the current pass (READ: request covers [sent, npkts))
  uint32_t rcvd = 0;   // READ: response packets received, in order
  Bytes data;          // SEND/WRITE inline: the message (§12.1 INLINE)
  // The WQE's local buffer, its SGEs' extents in order (§12.6): SEND and
  // WRITE packets read their payload from it as they are sent (IBA
  // 9.7.6.1: a retransmission reads it again); READ and atomic responses
  // land in it.
  std::vector<Extent> local;
  bool signaled = false;
  bool reads() const { return w.opcode == kWrRead || w.is_atomic(); }
};

// A receive WQE being filled (taken from the RQ or SRQ).
struct RecvCtx {
  bool valid = false;
  bool resolved = false;  // extents translated (first packet)
  uint64_t wr_id = 0;
  uint16_t index = 0;
  RecvWqe w;
  std::vector<Extent> ext;
};

struct QpRuntime {
  // requester (IBA 9.7.1 - 9.7.6)
  uint32_t sq_pi = 0;  // from SQ_DOORBELL (§12.5)
  uint32_t sq_ci = 0;  // next WQE to take
  std::deque<SendOp> inflight;
  uint32_t next_psn = 0;  // PSN of the next new request packet
  uint32_t una = 0;       // oldest unacknowledged PSN
  uint8_t retry_left = 0, rnr_left = 0;
  std::optional<DpClock::time_point> ack_due, rnr_until, pace_until;
  uint32_t read_gap_psn = 0xffffffff;
  bool kick = false;
  // responder (IBA 9.7.5)
  uint32_t rq_ci = 0;
  uint32_t epsn = 0, msn = 0;
  bool nak_sent = false;
  enum class In : uint8_t { kNone, kSend, kWrite } in = In::kNone;
  RecvCtx rwqe;
  uint64_t in_off = 0;
  uint64_t wr_len = 0;
  std::vector<Extent> wr_ext;
  struct SavedAtomic {
    uint32_t psn = 0;
    uint64_t orig = 0;
  };
  std::vector<SavedAtomic> atomics;  // for duplicate atomic requests (IBA 9.7.5.1.1)
  bool comm_est = false;
  // The responder's packets not yet sent, in PSN order (§12.8): RDMA READ
  // responses go out as the cable takes them (sim::Link::tx_room), and an
  // ACK, NAK or atomic ACK queues behind them.
  struct RespOut {
    bool read = false;
    sim::wire::Headers h;  // !read: the whole packet (no payload)
    // read: [va, va+len) as `ext`, packets from `psn`, `sent` of `npkts` sent
    uint32_t psn = 0, len = 0, npkts = 0, sent = 0, msn = 0;
    std::vector<Extent> ext;
  };
  // A FIFO on a vector (a std::deque allocates on construction: memory
  // for every QP, most of which never queue a response).
  struct RespQueue {
    std::vector<RespOut> v;
    size_t head = 0;
    bool empty() const { return head == v.size(); }
    RespOut& front() { return v[head]; }
    RespOut& emplace_back() { return v.emplace_back(); }
    void pop_front() {
      if (++head == v.size()) clear();
    }
    void clear() {
      v.clear();
      head = 0;
    }
  };
  RespQueue resp_out;
};

// §6.10, §7.7
struct Qp {
  QpCreate cfg;
  QpAttrs attrs;  // attrs.state is the QP state
  uint32_t uar_prev = kNoQp, uar_next = kNoQp;  // the QPs of cfg.uar (§12.5)
  uint32_t mcast_groups = 0;  // §6.11: the groups it is attached to
  QpRuntime rt;   // §12
};

}  // namespace openib::simhca
