// The ARP module's view of ibd's IPoIB interface (docs/arp.md "In ibd"):
// its ifindex, port, GID and P_Key, and the GID behind a neighbour's MAC
// (the bridge's MAC <-> 20-byte address table).
#pragma once

#include "arp/resolver.hpp"
#include "ibd/ipoib_service.hpp"

namespace openib::ibd {

class IpoibLinks final : public arp::LinkDirectory {
 public:
  explicit IpoibLinks(const IpoibService& ipoib) : ipoib_(ipoib) {}

  std::optional<arp::Link> link(int ifindex) const override {
    if (ifindex == 0 || ipoib_.ifindex() != ifindex) return std::nullopt;
    return arp::Link{ifindex, ipoib_.port(), ipoib_.port_gid(), ipoib_.pkey()};
  }
  std::vector<arp::Link> links() const override {
    if (auto l = link(ipoib_.ifindex())) return {*l};
    return {};
  }
  std::optional<std::array<uint8_t, 16>> gid_of(int ifindex, std::span<const uint8_t> lladdr) const override {
    if (ifindex == 0 || ipoib_.ifindex() != ifindex) return std::nullopt;
    return ipoib_.gid_of_mac(lladdr);
  }

 private:
  const IpoibService& ipoib_;
};

}  // namespace openib::ibd
