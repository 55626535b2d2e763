// The kernel side of the IPoIB bridge (docs/ipoib.md "The TAP interface";
// issue 16 item 2): an Ethernet TAP interface from /dev/net/tun
// (Documentation/networking/tuntap.rst), IFF_TAP | IFF_NO_PI, one frame
// per read()/write(), the fd non-blocking for ibd's loop.
//
//  - Not persistent: the interface lives as long as the fd; destroying
//    the TapDevice removes it (and its addresses and routes).
//  - Created administratively down, as Linux creates ib0: the user (or
//    the sandbox) runs `ip link set NAME up`; ibd never changes the
//    interface's up/down flag, only its carrier (set_carrier), which
//    follows the IB port and the broadcast join.
//  - The MAC and MTU are set at open (SIOCSIFHWADDR, SIOCSIFMTU);
//    set_mtu() follows a change of the broadcast group's MTU.
//  - Offloads on request (open's `offloads`): IFF_VNET_HDR, a 10-byte
//    little-endian virtio-net header before each frame both ways, and
//    TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6 | TUN_F_TSO_ECN: the kernel may
//    hand over partial checksums and TCP super-frames of up to 64 KiB,
//    which gso.hpp completes and cuts (docs/ipoib.md "The TAP interface").
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "common/fd.hpp"
#include "common/result.hpp"

namespace openib::ipoib {

class TapDevice {
 public:
  // `name`: the interface's name (at most 15 bytes; "" lets the kernel
  // pick tapN). Attaching to an existing persistent TAP of that name
  // works too (the kernel's TUNSETIFF does it); its MAC and MTU are set.
  // `offloads`: see above; then every read() starts with vnet_hdr_len()
  // bytes of header, and every write() must.
  static Result<TapDevice> open(const std::string& name, const std::array<std::uint8_t, 6>& mac,
                                std::uint32_t mtu, bool offloads = false);

  TapDevice(TapDevice&&) noexcept = default;
  TapDevice& operator=(TapDevice&&) noexcept = default;
  TapDevice(const TapDevice&) = delete;
  TapDevice& operator=(const TapDevice&) = delete;
  ~TapDevice() = default;  // closing the fd removes the interface

  int fd() const { return fd_.get(); }
  int ifindex() const { return ifindex_; }
  const std::string& name() const { return name_; }
  // 10 (kVnetHdrLen) with offloads, else 0.
  std::size_t vnet_hdr_len() const { return vnet_hdr_len_; }

  // TUNSETCARRIER (Linux >= 5.0): the interface's operstate/carrier as
  // the kernel and `ip link` show it (LOWER_UP, NO-CARRIER).
  Result<void> set_carrier(bool up);
  // SIOCSIFMTU; EINVAL from the kernel for an MTU below 68 or above 65535.
  Result<void> set_mtu(std::uint32_t mtu);
  // SIOCSIFHWADDR: a unicast MAC (the kernel refuses a multicast one).
  Result<void> set_mac(const std::array<std::uint8_t, 6>& mac);

 private:
  TapDevice(UniqueFd fd, std::string name, int ifindex, std::size_t vnet_hdr_len)
      : fd_(std::move(fd)), name_(std::move(name)), ifindex_(ifindex), vnet_hdr_len_(vnet_hdr_len) {}

  UniqueFd fd_;
  std::string name_;
  int ifindex_ = 0;
  std::size_t vnet_hdr_len_ = 0;
};

}  // namespace openib::ipoib
