// ATS records (ats.hpp has the layout and its sources).
#include "ipoib_tap/ats.hpp"

#include <sys/socket.h>

#include <algorithm>

namespace openib::ipoib {

sa::ServiceRecord ats_record(const sa::Gid& port_gid, std::uint16_t pkey, const IpAddr& a, std::uint8_t slot) {
  sa::ServiceRecord r;
  r.service_id = ats_service_id(slot);
  r.service_gid = port_gid;
  r.service_pkey = pkey;
  r.service_lease = sa::kInfiniteLease;
  r.service_name = kAtsServiceName;
  if (a.family == AF_INET)
    std::copy_n(a.bytes.begin(), 4, r.data8.begin() + kAtsIpv4Offset);
  else
    r.data8 = a.bytes;
  return r;
}

Result<IpAddr> ats_address(const sa::ServiceRecord& r) {
  if (r.service_name != kAtsServiceName) return err(ENOENT, "service '{}' is no ATS record", r.service_name);
  IpAddr a;
  bool v4 = std::all_of(r.data8.begin(), r.data8.begin() + kAtsIpv4Offset, [](auto b) { return b == 0; }) &&
            std::any_of(r.data8.begin() + kAtsIpv4Offset, r.data8.end(), [](auto b) { return b != 0; });
  if (v4) {
    a.family = AF_INET;
    std::copy_n(r.data8.begin() + kAtsIpv4Offset, 4, a.bytes.begin());
    a.prefix_len = 32;
  } else {
    a.family = AF_INET6;
    a.bytes = r.data8;
    a.prefix_len = 128;
  }
  return a;
}


Result<AtsSlots::Taken> AtsSlots::take(const IpAddr& a) {
  Key k{a.family, a.bytes};
  if (auto it = held_.find(k); it != held_.end()) {
    ++it->second.count;
    return Taken{it->second.slot, false};
  }
  auto free = std::find(used_.begin(), used_.end(), false);
  if (free == used_.end()) return err(ENOSPC, "no ATS slot left for {} ({} addresses hold them)", a.to_string(), kAtsSlots);
  *free = true;
  auto slot = static_cast<std::uint8_t>(free - used_.begin());
  held_.emplace(k, Held{slot, 1});
  return Taken{slot, true};
}

Result<AtsSlots::Given> AtsSlots::give_back(const IpAddr& a) {
  auto it = held_.find(Key{a.family, a.bytes});
  if (it == held_.end()) return err(ENOENT, "{} holds no ATS slot", a.to_string());
  Given g{it->second.slot, --it->second.count == 0};
  if (g.last) {
    used_[g.slot] = false;
    held_.erase(it);
  }
  return g;
}

}  // namespace openib::ipoib
