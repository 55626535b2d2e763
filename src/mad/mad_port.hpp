// One HCA port's management QPs, QP0 (SMI) and QP1 (GSI), owned by ibd's
// MAD layer (IBA 13.5): their rings, one CQ, a pool of 256-byte MAD send
// buffers and receive buffers (40-byte GRH + MAD), and an address-handle
// cache. MADs go out as UD SENDs (IBA 13.5.1); QP0 traffic is VL15 and
// takes no P_Key or Q_Key check (the device does that, docs/simhca.md §12.8).
//
// Single-threaded on ibd's io_context. Completions arrive through the CQ's
// completion event (the owner calls on_completion()).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <deque>
#include <list>
#include <map>
#include <memory>
#include <span>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/result.hpp"
#include "hca/device.hpp"
#include "mad/bytes.hpp"
#include "mad/transport.hpp"

namespace openib::mad {

class MadPort final : public MadTransport {
 public:

  // Asks the port what it can do (QUERY_PORT's link layer), then creates
  // the CQ, QP0 (only where the port has an SMI, hca::cap_ib_smi) and QP1
  // on `port`, moves them to RTS (P_Key index
  // 0; QP1's Q_Key kGsiQkey), posts the receive buffers and arms the CQ: a
  // chain of asynchronous commands, for ibd's loop (which never waits for
  // a command). `done` gets the port, or the first failure after what was
  // created has been destroyed again.
  using OpenDone = hca::Completer<Result<std::unique_ptr<MadPort>>>;
  // On an Ethernet port (RoCEv2) `dmac` gives each address handle its
  // destination MAC; every MAD goes with a GRH from the GID table entry of
  // MadAddress::local_gid (IBA Annex A17: QP1 only, no LIDs).
  static void open_async(hca::Device& hca, uint8_t port, OpenDone done, DmacLookup dmac = {});
  ~MadPort();
  MadPort(const MadPort&) = delete;
  MadPort& operator=(const MadPort&) = delete;

  uint8_t port() const override { return port_; }
  bool has_smi() const override { return smi_; }
  uint32_t cqn() const { return cq_.cqn; }
  void set_receiver(Receiver r) override { receiver_ = std::move(r); }

  // Posts one MAD (exactly kMadBytes) on QP `qp` (0 or 1) to `to`.
  // EAGAIN: every send buffer is in flight. A destination without an
  // address handle yet: the MAD waits while CREATE_AH runs asynchronously
  // (this runs on ibd's loop, which never waits for a command) and is
  // posted when it completes; a failure then counts as a send error.
  Result<void> send(uint8_t qp, const MadAddress& to, std::span<const std::byte> mad) override;
  bool on_cq_event(uint32_t cqn) override {
    if (cqn != cq_.cqn) return false;
    on_completion();
    return true;
  }

  // Polls the CQ: receives go to the receiver (their buffers reposted),
  // sends free their buffers; then re-arms the CQ.
  void on_completion();

  const MadPortCounters& counters() const override { return counters_; }

  // The address-handle cache's bound (default kDefaultMaxAhs): past it the
  // least recently used handle is destroyed (once no MAD queued or in
  // flight uses it). Every MAD destination gets a handle, and on RoCE any
  // host can make replies go to as many sources as it forges: the device's
  // AH table is shared with the clients (docs/mad.md "Address handles").
  static constexpr size_t kDefaultMaxAhs = 256;
  // Destinations whose CREATE_AH is in flight at once; a MAD to another
  // new one is dropped (EAGAIN, no_send_buffer) until one completes.
  static constexpr size_t kMaxAhsPending = 64;
  void set_max_ahs(size_t n) { max_ahs_ = n ? n : 1; }
  size_t cached_ahs() const { return ahs_.size(); }

 private:
  MadPort(hca::Device& hca, uint8_t port) : hca_(hca), port_(port) {}
  // open_async's rungs, each continuing the next; fail() undoes.
  static void rung_mkey(std::unique_ptr<MadPort> p, OpenDone done);
  static void rung_qp(std::unique_ptr<MadPort> p, OpenDone done, uint8_t q);
  static void rung_modify(std::unique_ptr<MadPort> p, OpenDone done, uint8_t q, hca::QpState to);
  static void finish(std::unique_ptr<MadPort> p, OpenDone done);
  static void fail(std::unique_ptr<MadPort> p, OpenDone done, Error e);
  // What is created, in the order it is destroyed; the have_ flags cleared.
  std::vector<std::pair<hca::ObjectKind, uint32_t>> teardown_steps();
  hca::QpInit qp_init(uint8_t q) const;
  Result<void> post_receives(uint8_t q);
  Result<void> post_recv_slot(uint8_t qp, uint32_t slot);
  using AhKey = std::tuple<uint16_t, uint8_t, uint8_t, bool, std::array<uint8_t, 16>, uint8_t, std::array<uint8_t, 16>>;
  struct Waiting {
    uint8_t qp = 0;
    MadAddress to;
    std::array<std::byte, kMadBytes> mad{};
  };
  static AhKey ah_key(const MadAddress& to);
  void create_ah_async(const AhKey& key, const MadAddress& to);
  void create_ah_with(const AhKey& key, const MadAddress& to, uint8_t sgid_index);
  void ah_failed(const AhKey& key, const Error& e);
  Result<void> post(uint8_t qp, const MadAddress& to, std::span<const std::byte> mad, uint32_t ahn);
  Result<void> post_now(uint8_t qp, const MadAddress& to, std::span<const std::byte> mad, uint32_t ahn);
  void drain_overflow();
  // The cache's LRU order and the references that keep an evicted handle
  // alive: a MAD waiting in overflow_ or posted and not yet completed.
  void cache_ah(const AhKey& key, uint32_t ahn);
  void ref_ah(uint32_t ahn) { ++ah_refs_[ahn]; }
  void unref_ah(uint32_t ahn);
  void destroy_ah(uint32_t ahn);
  struct Overflow {
    Waiting w;
    uint32_t ahn = 0;
  };
  std::byte* slot_ptr(size_t offset) const;
  uint64_t slot_va(size_t offset) const;

  hca::Device& hca_;
  uint8_t port_;
  bool smi_ = true;  // QP0 exists (qps_[0])
  bool ethernet_ = false;  // RoCEv2 (hca::protocol_roce): GRH always, dmac_ for the MAC
  DmacLookup dmac_;
  uint32_t pdn_ = 0;
  bool have_pd_ = false;
  hca::Cq cq_;
  hca::Qp qps_[2];
  bool have_cq_ = false, have_qp_[2] = {false, false};
  dma::DmaBuffer buf_;
  hca::Mkey mkey_{};
  bool have_mkey_ = false;
  std::vector<uint32_t> free_send_;  // send slot indices
  std::deque<Overflow> overflow_;    // MADs waiting for a send slot, in order
  struct CachedAh {
    uint32_t ahn = 0;
    std::list<AhKey>::iterator lru;
  };
  std::map<AhKey, CachedAh> ahs_;
  std::list<AhKey> lru_;  // most recently used first
  size_t max_ahs_ = kDefaultMaxAhs;
  std::unordered_map<uint32_t, uint32_t> ah_refs_;  // AHN -> MADs queued or in flight with it
  std::unordered_set<uint32_t> retiring_;            // evicted, destroyed when unreferenced
  std::vector<uint32_t> slot_ahn_;                   // per send slot: its MAD's AHN
  std::map<AhKey, std::vector<Waiting>> waiting_;  // MADs whose AH is being created
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);  // for CREATE_AH continuations
  Receiver receiver_;
  MadPortCounters counters_;
};

}  // namespace openib::mad
