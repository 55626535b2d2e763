// simhca's resource tables (docs/simhca.md §6, §7): one bounded table per
// object kind, numbers allocated round-robin (§6: a freed number is not
// reused at once), and the reference counts that make a destroy
// RESOURCE_BUSY while something still uses the object.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "sim/simhca/codec.hpp"

namespace openib::simhca {

template <typename T>
class Table {
 public:
  // Numbers [first, capacity) are allocated by alloc(); numbers below
  // `first` only by alloc_at() (QP0 and QP1).
  void reset(uint32_t capacity, uint32_t first = 0) {
    slots_.assign(capacity, std::nullopt);
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
        slots_[k] = std::move(v);
        cursor_ = k + 1 < n ? k + 1 : first_;
        ++count_;
        return k;
      }
    }
    return std::nullopt;
  }
  bool alloc_at(uint32_t k, T v) {
    if (k >= slots_.size() || slots_[k]) return false;
    slots_[k] = std::move(v);
    ++count_;
    return true;
  }
  T* get(uint32_t k) { return k < slots_.size() && slots_[k] ? &*slots_[k] : nullptr; }
  const T* get(uint32_t k) const { return k < slots_.size() && slots_[k] ? &*slots_[k] : nullptr; }
  void free(uint32_t k) {
    if (get(k)) {
      slots_[k].reset();
      --count_;
    }
  }
  uint32_t count() const { return count_; }
  bool has_free() const {
    for (size_t k = first_; k < slots_.size(); ++k)
      if (!slots_[k]) return true;
    return false;
  }
  template <typename F>
  void for_each(F&& f) {
    for (uint32_t k = 0; k < slots_.size(); ++k)
      if (slots_[k]) f(k, *slots_[k]);
  }

 private:
  std::vector<std::optional<T>> slots_;
  uint32_t first_ = 0, cursor_ = 0, count_ = 0;
};

struct Pd {
  uint32_t users = 0;  // QPs, SRQs, MKEYs, AHs
};

struct Uar {
  uint32_t users = 0;  // EQs, CQs, SRQs, QPs
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
  uint32_t producer = 0, consumer = 0;
  uint32_t users = 0;  // QP references (send and receive count separately)
};

// §7.4
struct Srq {
  CreateSrq cfg;
  uint8_t state = 0;
  uint32_t users = 0;  // QPs
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

// §6.10, §7.7
struct Qp {
  QpCreate cfg;
  QpAttrs attrs;  // attrs.state is the QP state
};

}  // namespace openib::simhca
