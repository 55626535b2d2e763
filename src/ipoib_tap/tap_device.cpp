// docs/ipoib.md "The TAP interface"; the ioctls are the kernel's
// Documentation/networking/tuntap.rst and netdevice(7).
#include "ipoib_tap/tap_device.hpp"

#include <fcntl.h>
#include <linux/if_tun.h>
#include <net/if.h>
#include <net/if_arp.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "ipoib_tap/gso.hpp"  // kVnetHdrLen

namespace openib::ipoib {
namespace {

// An ifreq naming `name` (IFNAMSIZ - 1 bytes at most, checked by open()).
ifreq named(const std::string& name) {
  ifreq r{};
  std::memcpy(r.ifr_name, name.data(), std::min(name.size(), std::size_t{IFNAMSIZ - 1}));
  return r;
}

// SIOCSIF* go through any socket of the interface's network namespace.
Result<void> netdev_ioctl(unsigned long req, ifreq& r, const char* what) {
  UniqueFd s(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!s) return sys_err("socket for {}", what);
  if (::ioctl(s.get(), req, &r) != 0) return sys_err("{} on {}", what, r.ifr_name);
  return ok();
}

}  // namespace

Result<TapDevice> TapDevice::open(const std::string& name, const std::array<std::uint8_t, 6>& mac,
                                  std::uint32_t mtu, bool offloads) {
  if (name.size() >= IFNAMSIZ) return err(EINVAL, "interface name '{}' longer than {} bytes", name, IFNAMSIZ - 1);
  UniqueFd fd(::open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC));
  if (!fd) return sys_err("open /dev/net/tun");
  ifreq r = named(name);
  r.ifr_flags = IFF_TAP | IFF_NO_PI;  // Ethernet frames, no 4-byte packet info
  if (offloads) r.ifr_flags |= IFF_VNET_HDR;
  if (::ioctl(fd.get(), TUNSETIFF, &r) != 0) return sys_err("TUNSETIFF '{}'", name);
  if (offloads) {
    // struct virtio_net_hdr without num_buffers, little-endian whatever
    // the host (gso.hpp reads it so); then what ibd does in gso.cpp.
    int len = static_cast<int>(kVnetHdrLen), le = 1;
    if (::ioctl(fd.get(), TUNSETVNETHDRSZ, &len) != 0) return sys_err("TUNSETVNETHDRSZ on '{}'", name);
    if (::ioctl(fd.get(), TUNSETVNETLE, &le) != 0) return sys_err("TUNSETVNETLE on '{}'", name);
    const unsigned long what = TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6 | TUN_F_TSO_ECN;
    if (::ioctl(fd.get(), TUNSETOFFLOAD, what) != 0) return sys_err("TUNSETOFFLOAD on '{}'", name);
  }
  std::string actual(r.ifr_name, ::strnlen(r.ifr_name, IFNAMSIZ));
  int ifindex = static_cast<int>(::if_nametoindex(actual.c_str()));
  if (ifindex == 0) return sys_err("if_nametoindex {}", actual);
  TapDevice dev(std::move(fd), std::move(actual), ifindex, offloads ? kVnetHdrLen : 0);
  if (auto m = dev.set_mac(mac); !m) return m.take_error();
  if (auto m = dev.set_mtu(mtu); !m) return m.take_error();
  return dev;
}

Result<void> TapDevice::set_carrier(bool up) {
  int on = up ? 1 : 0;
  if (::ioctl(fd_.get(), TUNSETCARRIER, &on) != 0) return sys_err("TUNSETCARRIER {} on {}", on, name_);
  return ok();
}

Result<void> TapDevice::set_mtu(std::uint32_t mtu) {
  if (mtu > 65535) return err(EINVAL, "MTU {} of {} above 65535", mtu, name_);
  ifreq r = named(name_);
  r.ifr_mtu = static_cast<int>(mtu);
  return netdev_ioctl(SIOCSIFMTU, r, "SIOCSIFMTU");
}

Result<void> TapDevice::set_mac(const std::array<std::uint8_t, 6>& mac) {
  ifreq r = named(name_);
  r.ifr_hwaddr.sa_family = ARPHRD_ETHER;
  std::memcpy(r.ifr_hwaddr.sa_data, mac.data(), mac.size());
  return netdev_ioctl(SIOCSIFHWADDR, r, "SIOCSIFHWADDR");
}

}  // namespace openib::ipoib
