// Fake switch and CA NodeModels for the SMA/PMA engine tests and fuzz_sma:
// plain in-memory state, the port state machine reduced to "store what the
// engine validated".
#pragma once

#include <map>
#include <vector>

#include "sim/sma/node_model.hpp"

namespace openib::sim::sma::testing {

class FakeNode : public NodeModel {
 public:
  FakeNode(mad::NodeType type, std::uint8_t ports, std::uint64_t guid) {
    id_.type = type;
    id_.num_ports = ports;
    id_.node_guid = guid;
    id_.system_image_guid = guid;
    id_.partition_cap = type == mad::NodeType::kSwitch ? 32 : 64;
    id_.device_id = type == mad::NodeType::kSwitch ? 0xB924 : 0x1003;
    id_.revision = 0xA0;
    id_.vendor_id = 0x0002C9;
    id_.description = type == mad::NodeType::kSwitch ? "fake switch" : "fake ca HCA-1";
    unsigned first = type == mad::NodeType::kSwitch ? 0 : 1;
    for (unsigned p = first; p <= ports; ++p) {
      mad::PortInfo pi;
      pi.local_port_num = static_cast<std::uint8_t>(p);
      pi.link_width_supported = 3;
      pi.link_width_enabled = 3;
      pi.link_width_active = 2;
      pi.link_speed_supported = 1;
      pi.link_speed_enabled = 1;
      pi.link_speed_active = 1;
      pi.port_state = static_cast<std::uint8_t>(mad::PortState::kInit);
      pi.port_phys_state = static_cast<std::uint8_t>(mad::PhysState::kLinkUp);
      pi.link_down_default_state = 2;
      pi.mtu_cap = 5;
      pi.neighbor_mtu = 5;
      pi.vl_cap = 4;
      pi.operational_vls = 4;
      pi.guid_cap = 8;
      pi.capability_mask = mad::port_cap::kIsTrapSupported;
      ports_[static_cast<std::uint8_t>(p)] = pi;
      mad::PKeyBlock pk{};
      pk[0] = mad::kDefaultPKey;
      pkeys_[static_cast<std::uint8_t>(p)] = pk;
      counters_[static_cast<std::uint8_t>(p)] = PortCounterValues{};
    }
    if (type == mad::NodeType::kSwitch) {
      si_.linear_fdb_cap = 0xC000;
      si_.multicast_fdb_cap = 1024;
      si_.lids_per_port = 1;
      si_.enhanced_port0 = false;
      si_.default_port = 1;
    }
  }

  const NodeIdentity& identity() const override { return id_; }
  mad::PortInfo port_info(std::uint8_t port) const override {
    auto it = ports_.find(port);
    return it == ports_.end() ? mad::PortInfo{} : it->second;
  }
  Status set_port_info(std::uint8_t port, const mad::PortInfo& next) override {
    if (!ports_.count(port)) return mad::status::kInvalidAttrValue;
    ++port_info_sets;
    ports_[port] = next;
    if (next.port_state == static_cast<std::uint8_t>(mad::PortState::kDown)) {
      // The link retrains and comes back: the port is in Init again.
      ports_[port].port_state = static_cast<std::uint8_t>(mad::PortState::kInit);
      ++link_retrains;
    }
    return mad::status::kOk;
  }
  std::optional<mad::PKeyBlock> pkey_block(std::uint8_t port, std::uint16_t block) const override {
    auto it = pkeys_.find(port);
    if (it == pkeys_.end() || block != 0) return std::nullopt;
    return it->second;
  }
  Status set_pkey_block(std::uint8_t port, std::uint16_t block, const mad::PKeyBlock& v) override {
    if (!pkeys_.count(port) || block != 0) return mad::status::kInvalidAttrValue;
    pkeys_[port] = v;
    return mad::status::kOk;
  }
  std::optional<mad::SlToVlTable> sl2vl(std::uint8_t in, std::uint8_t out) const override {
    auto it = sl2vl_.find({in, out});
    return it == sl2vl_.end() ? mad::SlToVlTable{} : it->second;
  }
  Status set_sl2vl(std::uint8_t in, std::uint8_t out, const mad::SlToVlTable& v) override {
    sl2vl_[{in, out}] = v;
    return mad::status::kOk;
  }
  std::optional<mad::GuidBlock> guid_block(std::uint8_t port, std::uint16_t block) const override {
    if (block != 0) return std::nullopt;
    mad::GuidBlock g{};
    g[0] = port_guid(port);
    return g;
  }
  std::optional<mad::SwitchInfo> switch_info() const override {
    if (id_.type != mad::NodeType::kSwitch) return std::nullopt;
    return si_;
  }
  Status set_switch_info(const mad::SwitchInfo& next) override {
    si_ = next;
    return mad::status::kOk;
  }
  std::optional<mad::LftBlock> lft_block(std::uint16_t block) const override {
    if (id_.type != mad::NodeType::kSwitch) return std::nullopt;
    auto it = lft_.find(block);
    if (it == lft_.end()) {
      mad::LftBlock b;
      b.fill(0xFF);
      return b;
    }
    return it->second;
  }
  Status set_lft_block(std::uint16_t block, const mad::LftBlock& v) override {
    lft_[block] = v;
    return mad::status::kOk;
  }
  std::optional<mad::MftBlock> mft_block(std::uint16_t block, std::uint8_t pos) const override {
    if (id_.type != mad::NodeType::kSwitch) return std::nullopt;
    auto it = mft_.find({block, pos});
    return it == mft_.end() ? mad::MftBlock{} : it->second;
  }
  Status set_mft_block(std::uint16_t block, std::uint8_t pos, const mad::MftBlock& v) override {
    mft_[{block, pos}] = v;
    return mad::status::kOk;
  }
  bool has_sm() const override { return sm; }
  std::optional<PortCounterValues> counters(std::uint8_t port) const override {
    auto it = counters_.find(port);
    if (it == counters_.end()) return PortCounterValues{};  // switch port 0
    return it->second;
  }
  void reset_counters(std::uint8_t port, std::uint32_t bits) override {
    auto it = counters_.find(port);
    if (it != counters_.end()) reset_counter_values(it->second, bits);
  }

  // Test access.
  mad::PortInfo& port(std::uint8_t p) { return ports_[p]; }
  PortCounterValues& counter(std::uint8_t p) { return counters_[p]; }
  mad::SwitchInfo& sw_info() { return si_; }
  bool sm = false;
  int port_info_sets = 0;
  int link_retrains = 0;

 private:
  NodeIdentity id_;
  std::map<std::uint8_t, mad::PortInfo> ports_;
  std::map<std::uint8_t, mad::PKeyBlock> pkeys_;
  std::map<std::pair<std::uint8_t, std::uint8_t>, mad::SlToVlTable> sl2vl_;
  std::map<std::uint8_t, PortCounterValues> counters_;
  mad::SwitchInfo si_;
  std::map<std::uint16_t, mad::LftBlock> lft_;
  std::map<std::pair<std::uint16_t, std::uint8_t>, mad::MftBlock> mft_;
};

}  // namespace openib::sim::sma::testing
