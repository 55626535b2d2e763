// Topology files for ibfabric (docs/ibfabric.md "Topology format"): the
// ibsim "net" format and the output of ibnetdiscover, which ibsim's format
// is a superset of. A pure parser: text in, a Topology or an Error out
// ("FILE:LINE: what"), never a crash (fuzzed by test/fuzz/fuzz_topology.cpp).
//
//   # comment
//   switchguid=0x0002c90200000000(2c90200000000)  guid of the next switch
//   Switch  8 "Switch1"  # "desc" enhanced port 0 lid 6 lmc 0
//   [1]     "Hca1"[1]                 w=4 s=1   (ibsim per-port options)
//   [2]     "H-0002c90300000001"[1](2c90300000002)  # "desc" lid 4 4xQDR
//   <blank line ends the record>
//   caguid=0x...
//   Ca      2 "Hca1"      (or Hca)
//   [1](portguid)  "Switch1"[1]  # lid 4 lmc 0 "desc" lid 6 4xSDR
//
// A link may be written at both ends (they must agree) or at one end only.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.hpp"

namespace openib::sim::fabric {

// NodeInfo NodeType values (IBA 14.2.5.3).
enum class NodeKind : std::uint8_t { kCa = 1, kSwitch = 2, kRouter = 3 };
const char* node_kind_name(NodeKind k);

inline constexpr unsigned kMaxNodePorts = 254;  // LFT entry 255 means "no port" (IBA 14.2.5.10)
inline constexpr std::size_t kMaxNodeDescription = 64;  // NodeDescription (IBA 14.2.5.2)

struct TopoPort {
  bool cabled = false;
  int remote_node = -1;  // index into Topology::nodes
  std::uint8_t remote_port = 0;
  std::optional<std::uint64_t> guid;  // "(portguid)" in the file (CA and router ports)
  // PortInfo LinkWidthEnabled / LinkSpeedEnabled / LinkSpeedExtEnabled
  // (IBA 14.2.5.6) as the file asks ("w=", "s=", "e=", "4xQDR"), else the
  // file's width= / speed= / extspeed= defaults.
  std::uint8_t width_enabled = 0;
  std::uint8_t speed_enabled = 0;
  std::uint8_t speed_ext_enabled = 0;
  std::uint16_t lid = 0;  // "# lid N lmc M" of an ibnetdiscover CA port line
  std::uint8_t lmc = 0;
  int line = 0;  // where the port was written (0: only by its peer)
};

struct TopoNode {
  NodeKind kind = NodeKind::kCa;
  std::string name;         // the quoted id of the header line, unique
  std::string description;  // NodeDescription: the "# "desc"" or else the name
  unsigned num_ports = 0;
  std::uint64_t guid = 0;
  std::uint64_t sys_image_guid = 0;
  std::uint32_t vendor_id = 0;  // 24 bits
  std::uint16_t device_id = 0;
  bool enhanced_port0 = false;   // "enhanced port 0" (switches)
  std::uint16_t lid = 0;         // "lid N" of a switch header (port 0)
  std::uint8_t lmc = 0;
  std::vector<TopoPort> ports;   // index = port number, 0..num_ports
  int line = 0;

  bool is_switch() const { return kind == NodeKind::kSwitch; }
  // A switch's ports share the node GUID (port 0's); CA/router port n has
  // the file's "(guid)" or node GUID + n (as ibsim and simhca assign them).
  std::uint64_t port_guid(unsigned port) const;
};

struct TopoLink {
  int a_node = -1;
  std::uint8_t a_port = 0;
  int b_node = -1;
  std::uint8_t b_port = 0;
};

struct Topology {
  std::vector<TopoNode> nodes;
  std::vector<TopoLink> links;      // each cable once
  std::vector<std::string> notes;   // "FILE:LINE: ignored ..." for lines skipped on purpose

  int find(std::string_view name) const;  // node index or -1
  std::size_t count(NodeKind k) const;
};

struct ParseOptions {
  std::string source = "topology";  // the name in error messages
  // Reads the file an "include <file>" line names; unset: include is an error.
  std::function<Result<std::string>(const std::string& name)> include;
  int max_include_depth = 8;
};

// Errors are EINVAL with "SOURCE:LINE: message" (ENOENT etc. from include).
Result<Topology> parse_topology(std::string_view text, const ParseOptions& opts = {});

// The GUID a node gets when the file gives none: the ibnetdiscover name form
// "S-0002c90200001234" / "H-..." / "R-..." (16 hex digits) gives those
// digits; any other name a hash of it (FNV-1a 64) in 0x02xxxxxxxxxxxx00
// (the locally administered EUI-64 bit, the low byte left for port GUIDs).
std::uint64_t guid_for_name(std::string_view name);

}  // namespace openib::sim::fabric
