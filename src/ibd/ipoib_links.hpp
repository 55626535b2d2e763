// The ARP module's view of ibd's interfaces (docs/arp.md "In ibd"): the
// IPoIB interface (its ifindex, port, GID and P_Key, and the GID behind a
// neighbour's MAC: the bridge's MAC <-> 20-byte address table) and an
// Ethernet port's netdev (docs/operations.md "RoCE ports": its ifindex,
// port and GID 0, ethernet set; a neighbour's MAC is its own, no GID).
#pragma once

#include "arp/resolver.hpp"
#include "ibd/ipoib_service.hpp"
#include "ibd/netdev_service.hpp"

namespace openib::ibd {

class IpoibLinks final : public arp::LinkDirectory {
 public:
  // Either may be null (not configured).
  IpoibLinks(const IpoibService* ipoib, const NetdevService* netdev) : ipoib_(ipoib), netdev_(netdev) {}

  std::optional<arp::Link> link(int ifindex) const override {
    if (ifindex == 0) return std::nullopt;
    if (ipoib_ && ipoib_->ifindex() == ifindex)
      return arp::Link{ifindex, ipoib_->port(), ipoib_->port_gid(), ipoib_->pkey()};
    if (netdev_ && netdev_->ifindex() == ifindex) {
      arp::Link l{ifindex, netdev_->port(), netdev_->port_gid(), 0xFFFF};
      l.ethernet = true;
      return l;
    }
    return std::nullopt;
  }
  std::vector<arp::Link> links() const override {
    std::vector<arp::Link> v;
    if (ipoib_)
      if (auto l = link(ipoib_->ifindex())) v.push_back(*l);
    if (netdev_)
      if (auto l = link(netdev_->ifindex())) v.push_back(*l);
    return v;
  }
  std::optional<std::array<uint8_t, 16>> gid_of(int ifindex, std::span<const uint8_t> lladdr) const override {
    if (ifindex == 0 || !ipoib_ || ipoib_->ifindex() != ifindex) return std::nullopt;
    return ipoib_->gid_of_mac(lladdr);
  }

 private:
  const IpoibService* ipoib_;
  const NetdevService* netdev_;
};

}  // namespace openib::ibd
