// make_loopback_pair() (link.hpp): two in-process ports cabled to each
// other. send() runs the direction's fault injection and queues what is to
// go on the wire; pump() takes packets off the queues, alternating the
// directions, and delivers each to the far end, which validates it like a
// UdpLink (rx_check.hpp) before its receiver sees it. Nothing happens
// outside pump(), so a test steps the wire explicitly. An Ethernet pair
// (LoopbackFraming::kEthernet) carries frames as UdpLink's Ethernet
// framing does: sent as filled, only their size checked on delivery.
#include <array>
#include <deque>
#include <mutex>
#include <string>
#include <vector>

#include "sim/cable/fault_injector.hpp"
#include "sim/cable/link.hpp"
#include "sim/cable/link_counters.hpp"
#include "sim/cable/rx_check.hpp"

namespace openib::sim {

namespace {

class LoopbackPairImpl;

class LoopbackEnd final : public Link {
 public:
  LoopbackEnd(LoopbackPairImpl& pair, int side) : pair_(pair), side_(side) {}
  Result<void> send(std::span<const std::byte> packet) override;
  bool carries_frames() const override;
  void set_receiver(Receiver r) override;
  LinkStats stats() const override { return counters_.snapshot(); }

 private:
  friend class LoopbackPairImpl;
  LoopbackPairImpl& pair_;
  int side_;  // 0: a, 1: b
  LinkCounters counters_;
  std::shared_ptr<const Receiver> receiver_;  // guarded by the pair's mutex
  std::atomic<unsigned> warned_{0};
};

class LoopbackPairImpl final : public LoopbackPair {
 public:
  explicit LoopbackPairImpl(LoopbackFraming framing)
      : eth_(framing == LoopbackFraming::kEthernet), ends_{LoopbackEnd(*this, 0), LoopbackEnd(*this, 1)} {}
  bool ethernet() const { return eth_; }
  Link& a() override { return ends_[0]; }
  Link& b() override { return ends_[1]; }

  void set_faults(const FaultSpec& a_to_b, const FaultSpec& b_to_a) override {
    std::lock_guard lk(mu_);
    dirs_[0].faults.reset(a_to_b);
    dirs_[1].faults.reset(b_to_a);
  }

  size_t pump(size_t max) override {
    // Only what is queued now: a receiver that answers from its callback
    // queues for the next pump(), so one call is bounded.
    std::array<size_t, 2> left{};
    {
      std::lock_guard lk(mu_);
      left = {dirs_[0].queue.size(), dirs_[1].queue.size()};
    }
    size_t delivered = 0;
    while (delivered < max && (left[0] > 0 || left[1] > 0)) {
      for (int d = 0; d < 2 && delivered < max; ++d) {
        if (left[d] == 0) continue;
        --left[d];
        std::vector<std::byte> pkt;
        std::shared_ptr<const Link::Receiver> rx;
        LoopbackEnd& to = ends_[1 - d];
        {
          std::lock_guard lk(mu_);
          auto& q = dirs_[d].queue;
          if (q.empty()) {  // another thread pumped it
            left[d] = 0;
            continue;
          }
          pkt = std::move(q.front());
          q.pop_front();
          rx = to.receiver_;
        }
        ++delivered;
        // A frame: its port judges the contents, only its size here.
        if (!(eth_ ? count_received_frame(pkt, to.counters_, name(1 - d), to.warned_)
                   : count_received(pkt, to.counters_, name(1 - d), to.warned_)))
          continue;
        if (!rx || !*rx) {
          LinkCounters::bump(to.counters_.rx_dropped_no_receiver);
          continue;
        }
        (*rx)(pkt);
      }
    }
    return delivered;
  }

  size_t queued() const override {
    std::lock_guard lk(mu_);
    return dirs_[0].queue.size() + dirs_[1].queue.size();
  }

  void enqueue(int side, std::span<const std::byte> packet) {
    LinkCounters& c = ends_[side].counters_;
    LinkCounters::bump(c.tx_packets);
    LinkCounters::bump(c.tx_bytes, packet.size());
    std::lock_guard lk(mu_);
    Direction& d = dirs_[side];
    if (!d.faults.active()) {
      d.queue.emplace_back(packet.begin(), packet.end());
      return;
    }
    std::vector<std::vector<std::byte>> out;
    d.faults.apply(packet, out, c);
    for (auto& p : out) d.queue.push_back(std::move(p));
  }

  void set_receiver(int side, Link::Receiver r) {
    auto p = std::make_shared<const Link::Receiver>(std::move(r));
    std::lock_guard lk(mu_);
    ends_[side].receiver_ = std::move(p);
  }

 private:
  static std::string name(int side) { return side == 0 ? "loopback.a" : "loopback.b"; }

  struct Direction {
    FaultInjector faults;
    std::deque<std::vector<std::byte>> queue;
  };
  const bool eth_;
  mutable std::mutex mu_;
  std::array<Direction, 2> dirs_;  // [0]: a -> b, [1]: b -> a
  std::array<LoopbackEnd, 2> ends_;
};

Result<void> LoopbackEnd::send(std::span<const std::byte> packet) {
  pair_.enqueue(side_, packet);
  return ok();
}

bool LoopbackEnd::carries_frames() const { return pair_.ethernet(); }

void LoopbackEnd::set_receiver(Receiver r) { pair_.set_receiver(side_, std::move(r)); }

}  // namespace

std::unique_ptr<LoopbackPair> make_loopback_pair(LoopbackFraming framing) {
  return std::make_unique<LoopbackPairImpl>(framing);
}

}  // namespace openib::sim
