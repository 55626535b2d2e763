// ATS, DAPL's Address Translation Service (docs/ipoib.md "ATS
// registration"): a ServiceRecord (IBA 15.2.5.14) per IP address of the
// interface, mapping the address to the port's GID. Its layout, from the
// published sources that define it:
//
//  - ServiceID 0x10000CE100415453, ServiceName "DAPL Address Translation
//    Service": WinOF's IBAL header, github lucasz93/WinOFED
//    inc/iba/ib_al.h:108-109 (ATS_SERVICE_ID, ATS_NAME), and OpenIB's
//    kernel ATS client, github dduval/kernel-rhel4 @6a9f0c72
//    drivers/infiniband/core/at_priv.h:130-131.
//  - The address in ServiceData8[0..15] as a 16-byte IPv6 address; an
//    IPv4 address in ServiceData8[12..15] (network order) with bytes 0..11
//    zero: ATS_IPV4_OFFSET 12 (ib_al.h:110); at_priv.h:45-51, 60-66 (the
//    32-bit node_addr at word 3 of ServiceData); DAPL's lookup key
//    (lucasz93/WinOFED ulp/dapl2/dapl/ibal/dapl_ibal_name_service.c:
//    233-259, dapls_ib_ns_map_gid) copies an IPv4 address to s6_addr[12]
//    of a zeroed IPv6 address and an IPv6 address whole, and the older
//    IBAL provider matches all 16 ServiceData8 bytes in its GetTable.
//    IPv6 is therefore the 16 bytes of the address, as DAPL looks it up.
//  - ServiceGID the port's GID, ServiceP_Key the interface's P_Key,
//    ServiceLease infinite (0xFFFFFFFF), ServiceKey zero: WinOF's IPoIB
//    registration, lucasz93/WinOFED ulp/ipoib_ndis5/kernel/
//    ipoib_driver.c:2399-2458; at.c:93-110 (build_ats_req).
//  - Several addresses on one port: the SA keys a ServiceRecord by
//    (ServiceID, ServiceGID, ServiceP_Key), so each address needs its own
//    ServiceID. OpenIB reserves 0x10000CE1_00_415453 to
//    0x10000CE1_FF_415453 for a node's ATS records (at_priv.h:103-107,
//    132: IB_ATS_LAST_SERVICE_ID), the varying byte being bits 24..31:
//    `slot` picks it (0: the canonical ID). (WinOF's IPoIB varies the
//    lowest byte instead, ipoib_driver.c:2452-2455; we follow OpenIB's
//    range, which its lookups by name accept.)
// DAPL's lookups select ServiceName (or ServiceID) and ServiceData8, so
// the records are found by name and address whatever the slot.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <utility>

#include "ipoib_tap/ip_addr.hpp"
#include "sa/service_record.hpp"

namespace openib::ipoib {

inline constexpr std::uint64_t kAtsServiceId = 0x10000CE100415453ull;
inline constexpr const char* kAtsServiceName = "DAPL Address Translation Service";
inline constexpr unsigned kAtsIpv4Offset = 12;  // in ServiceData8
inline constexpr unsigned kAtsSlots = 256;

// The ServiceID of slot `slot` (0..255).
constexpr std::uint64_t ats_service_id(std::uint8_t slot) {
  return kAtsServiceId | (std::uint64_t{slot} << 24);
}

// The record for address `a` (its prefix length is not part of it).
sa::ServiceRecord ats_record(const sa::Gid& port_gid, std::uint16_t pkey, const IpAddr& a,
                             std::uint8_t slot = 0);

// The address an ATS record carries (any record with the ATS name; ENOENT
// for another service). IPv4 when ServiceData8[0..11] are zero and the
// last 4 are not (DAPL's convention; ::a.b.c.d is not told apart).
Result<IpAddr> ats_address(const sa::ServiceRecord& r);

// Which slot each address's record has: the lowest free one. The record
// is the address's, not the prefix's: an address listed with two prefix
// lengths (IPv4 allows it) has one record, deleted when both are gone.
class AtsSlots {
 public:
  struct Taken {
    std::uint8_t slot;
    bool fresh;  // the address had no record: register it
  };
  struct Given {
    std::uint8_t slot;
    bool last;  // no listing of the address is left: delete its record
  };
  // ENOSPC when all kAtsSlots slots are held.
  Result<Taken> take(const IpAddr& a);
  // ENOENT if the address holds no slot.
  Result<Given> give_back(const IpAddr& a);
  std::size_t size() const { return held_.size(); }

 private:
  using Key = std::pair<int, std::array<std::uint8_t, 16>>;
  struct Held {
    std::uint8_t slot;
    unsigned count;
  };
  std::map<Key, Held> held_;
  std::array<bool, kAtsSlots> used_{};
};

}  // namespace openib::ipoib
