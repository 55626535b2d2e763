// A second implementation of the device seam (src/hca/device.hpp) for the
// driver-table test (test_driver_seam.cpp): it holds the device a built-in
// driver opened, reaches it only through hca::Device, and counts every call
// and event by name. ibd run with it as the driver of simhca's PCI ID
// (ibd_counting.cpp) works only if ibd and its services use the seam alone.
// At the end it writes the counts to stderr (ibd's log): one line,
// "counting driver: name=N name=N ...". Ports named in `ethernet_ports`
// say they are Ethernet (QUERY_PORT's link layer), as the RoCE issue's
// ports will: ibd must then give them no QP0 and no SA traffic.
#pragma once

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <set>
#include <string>

#include "hca/device.hpp"

namespace openib::testing {

class CountingDevice final : public hca::Device {
 public:
  explicit CountingDevice(std::unique_ptr<hca::Device> inner, std::set<uint8_t> ethernet_ports = {})
      : in_(std::move(inner)), ethernet_(std::move(ethernet_ports)) {
    info_ = in_->info();
    info_.driver = "counting(" + info_.driver + ")";
  }
  ~CountingDevice() override {
    std::string line = "counting driver:";
    for (const auto& [name, n] : n_) line += " " + name + "=" + std::to_string(n);
    std::fprintf(stderr, "%s\n", line.c_str());
  }

  const std::string& name() const override { return in_->name(); }
  const hca::DeviceInfo& info() const override { return info_; }
  const hca::DeviceCaps& caps() const override { return in_->caps(); }
  bool alive() const override { return in_->alive(); }
  bool is_open() const override { return in_->is_open(); }
  dma::DmaPool& pool() override { return in_->pool(); }
  uint64_t interrupts_seen() const override { return in_->interrupts_seen(); }
  Result<hca::DeviceObjects> device_objects() override { return count("device_objects"), in_->device_objects(); }
  void set_event_handler(EventHandler h) override {
    in_->set_event_handler([this, h = std::move(h)](const hca::Event& e) {
      std::string name = std::string("event.") + hca::event_name(e.kind);
      std::replace(name.begin(), name.end(), ' ', '_');
      count(name);
      if (h) h(e);
    });
  }

  Result<void> close(bool force) override { return count("close"), in_->close(force); }
  void fence(const Error& why) override { count("fence"), in_->fence(why); }
  Result<void> close_dead() override { return count("close_dead"), in_->close_dead(); }
  void reopen_async(Done<void> done) override { count("reopen_async"), in_->reopen_async(std::move(done)); }
  bool drain(int timeout_ms) override { return in_->drain(timeout_ms); }

  void nop_async(Done<void> done) override { count("nop"), in_->nop_async(std::move(done)); }
  void query_port_async(uint8_t port, Done<hca::PortAttr> done) override {
    count("query_port");
    if (!ethernet_.contains(port)) return in_->query_port_async(port, std::move(done));
    in_->query_port_async(port, [d = std::move(done)](Result<hca::PortAttr> a) mutable {
      if (a) a->link_layer = hca::LinkLayer::kEthernet;
      d(std::move(a));
    });
  }
  void set_port_async(uint8_t port, const hca::PortSetup& s, Done<void> done) override {
    count("set_port"), in_->set_port_async(port, s, std::move(done));
  }
  void query_gid_async(uint8_t port, uint16_t index, Done<hca::GidEntry> done) override {
    count("query_gid"), in_->query_gid_async(port, index, std::move(done));
  }
  void modify_gid_async(uint8_t port, uint16_t index, const std::optional<hca::GidEntry>& e, Done<void> done) override {
    count("modify_gid"), in_->modify_gid_async(port, index, e, std::move(done));
  }
  void alloc_pd_async(Done<uint32_t> done) override { count("alloc_pd"), in_->alloc_pd_async(std::move(done)); }
  void alloc_uar_async(Done<uint32_t> done) override { count("alloc_uar"), in_->alloc_uar_async(std::move(done)); }
  Result<UniqueFd> uar_page_fd(uint32_t uar) override { return count("uar_page_fd"), in_->uar_page_fd(uar); }
  void create_cq_at_async(uint8_t log_size, uint64_t ring, uint64_t dbr, uint32_t uar, Done<uint32_t> done) override {
    count("create_cq_at"), in_->create_cq_at_async(log_size, ring, dbr, uar, std::move(done));
  }
  void create_srq_at_async(uint32_t pdn, uint8_t log_size, uint8_t log_stride, uint64_t ring, uint64_t dbr,
                           uint32_t limit, uint32_t uar, Done<uint32_t> done) override {
    count("create_srq_at"), in_->create_srq_at_async(pdn, log_size, log_stride, ring, dbr, limit, uar, std::move(done));
  }
  void arm_srq_async(uint32_t srqn, uint32_t limit, Done<void> done) override {
    count("arm_srq"), in_->arm_srq_async(srqn, limit, std::move(done));
  }
  void create_qp_at_async(const hca::QpCreateParams& p, Done<uint32_t> done) override {
    count("create_qp_at"), in_->create_qp_at_async(p, std::move(done));
  }
  void modify_qp_async(uint32_t qpn, uint32_t mask, const hca::QpAttr& a, Done<void> done) override {
    count("modify_qp"), in_->modify_qp_async(qpn, mask, a, std::move(done));
  }
  void query_qp_async(uint32_t qpn, Done<hca::QpInfo> done) override {
    count("query_qp"), in_->query_qp_async(qpn, std::move(done));
  }
  void create_mkey_async(const hca::MkeyParams& p, Done<hca::Mkey> done) override {
    count("create_mkey"), in_->create_mkey_async(p, std::move(done));
  }
  void create_ah_async(uint32_t pdn, const hca::AddressVector& av, Done<uint32_t> done) override {
    count("create_ah"), in_->create_ah_async(pdn, av, std::move(done));
  }
  void attach_mcast_async(uint32_t qpn, const std::array<uint8_t, 16>& mgid, uint16_t mlid, Done<void> done) override {
    count("attach_mcast"), in_->attach_mcast_async(qpn, mgid, mlid, std::move(done));
  }
  void detach_mcast_async(uint32_t qpn, const std::array<uint8_t, 16>& mgid, uint16_t mlid, Done<void> done) override {
    count("detach_mcast"), in_->detach_mcast_async(qpn, mgid, mlid, std::move(done));
  }
  void destroy_async(hca::ObjectKind kind, uint32_t number, Done<void> done) override {
    count("destroy"), in_->destroy_async(kind, number, std::move(done));
  }
  void create_cq_async(uint8_t log_size, Done<hca::Cq> done) override {
    count("create_cq"), in_->create_cq_async(log_size, std::move(done));
  }
  void create_qp_async(const hca::QpInit& init, Done<hca::Qp> done) override {
    count("create_qp");
    if (init.type == hca::QpType::kSmi) count("create_qp.smi");
    if (init.type == hca::QpType::kGsi) count("create_qp.gsi");
    in_->create_qp_async(init, std::move(done));
  }

  Result<void> post_send(hca::Qp& qp, const hca::SendWr& wr, bool ring) override {
    return count("post_send"), in_->post_send(qp, wr, ring);
  }
  Result<void> ring_sq(hca::Qp& qp) override { return count("ring_sq"), in_->ring_sq(qp); }
  Result<void> post_recv(hca::Qp& qp, const hca::RecvWr& wr) override { return count("post_recv"), in_->post_recv(qp, wr); }
  Result<void> post_srq_recv(hca::Srq& s, const hca::RecvWr& wr) override {
    return count("post_srq_recv"), in_->post_srq_recv(s, wr);
  }
  void create_srq_async(uint32_t pdn, uint8_t log_size, uint8_t log_stride, Done<hca::Srq> done) override {
    count("create_srq"), in_->create_srq_async(pdn, log_size, log_stride, std::move(done));
  }
  std::vector<hca::WorkCompletion> poll_cq(hca::Cq& cq, size_t max) override {
    auto wcs = in_->poll_cq(cq, max);
    n_["completions"] += wcs.size();
    return wcs;
  }
  Result<void> arm_cq(hca::Cq& cq, bool solicited_only) override { return count("arm_cq"), in_->arm_cq(cq, solicited_only); }

  // How many calls of that name so far (the names of the end's line).
  uint64_t calls(const std::string& what) const {
    auto it = n_.find(what);
    return it == n_.end() ? 0 : it->second;
  }

 private:
  void count(const std::string& what) { ++n_[what]; }
  std::unique_ptr<hca::Device> in_;
  std::set<uint8_t> ethernet_;
  hca::DeviceInfo info_;
  std::map<std::string, uint64_t> n_;
};

}  // namespace openib::testing
