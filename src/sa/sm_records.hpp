// SA records that wrap a subnet-management attribute (IBA 15.2.5.2,
// 15.2.5.3): NodeRecord (LID + NodeInfo + NodeDescription) and
// PortInfoRecord (LID, port + PortInfo). The wrapped attributes are
// src/mad's codecs; only the record framing is here.
#pragma once

#include <cstdint>
#include <string>

#include "common/result.hpp"
#include "mad/sma_attrs.hpp"
#include "sa/sa_mad.hpp"

namespace openib::sa {

// ---- NodeRecord, IBA 15.2.5.2: LID (0,16), reserved (16,16), NodeInfo
// (bytes 4..43), NodeDescription (bytes 44..107) ---------------------------
inline constexpr std::size_t kNodeRecordBytes = 108;
namespace nr_mask {  // ComponentMask bits (OpenSM's IB_NR_COMPMASK_*)
inline constexpr std::uint64_t kLid = 1ull << 0;
inline constexpr std::uint64_t kNodeType = 1ull << 4;
inline constexpr std::uint64_t kNodeGuid = 1ull << 7;
inline constexpr std::uint64_t kPortGuid = 1ull << 8;
inline constexpr std::uint64_t kNodeDescription = 1ull << 14;
}  // namespace nr_mask
struct NodeRecord {
  std::uint16_t lid = 0;
  mad::NodeInfo node_info;
  std::string node_description;  // up to 64 bytes
  bool operator==(const NodeRecord&) const = default;
};
void encode_node_record(MutBytes out, const NodeRecord& v);
Result<NodeRecord> decode_node_record(ConstBytes in);

// ---- PortInfoRecord, IBA 15.2.5.3: EndportLID (0,16), PortNum (16,8),
// Options (24,8), PortInfo (bytes 4..67) ------------------------------------
inline constexpr std::size_t kPortInfoRecordBytes = 68;
namespace pir_mask {
inline constexpr std::uint64_t kLid = 1ull << 0;
inline constexpr std::uint64_t kPortNum = 1ull << 1;
inline constexpr std::uint64_t kOptions = 1ull << 2;
}  // namespace pir_mask
struct PortInfoRecord {
  std::uint16_t endport_lid = 0;
  std::uint8_t port_num = 0;
  std::uint8_t options = 0;
  mad::PortInfo port_info;
  bool operator==(const PortInfoRecord&) const = default;
};
void encode_port_info_record(MutBytes out, const PortInfoRecord& v);
Result<PortInfoRecord> decode_port_info_record(ConstBytes in);

}  // namespace openib::sa
