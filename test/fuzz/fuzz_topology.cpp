// libFuzzer target: arbitrary text into ibfabric's topology parser
// (src/sim/fabric/topology.hpp). Nothing may crash, hang or read out of
// bounds; an "include" of any name reads the input itself again (bounded by
// the include depth). A topology that parses must be consistent: every
// cable's two ends point at each other, ports are in range, names unique.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <set>
#include <string>
#include <string_view>

#include "sim/fabric/topology.hpp"

using namespace openib::sim::fabric;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  ParseOptions o;
  o.source = "fuzz";
  o.max_include_depth = 3;
  o.include = [&text](const std::string&) -> openib::Result<std::string> { return text; };
  auto t = parse_topology(text, o);
  if (!t.ok()) {
    if (t.error().message.empty()) std::abort();
    return 0;
  }
  std::set<std::string> names;
  for (const TopoNode& n : t->nodes) {
    if (!names.insert(n.name).second) std::abort();
    if (n.num_ports < 1 || n.num_ports > kMaxNodePorts || n.ports.size() != n.num_ports + 1) std::abort();
    if (n.description.empty() || n.description.size() > kMaxNodeDescription) std::abort();
  }
  for (const TopoLink& l : t->links) {
    if (l.a_node < 0 || l.b_node < 0 || static_cast<size_t>(l.a_node) >= t->nodes.size() ||
        static_cast<size_t>(l.b_node) >= t->nodes.size())
      std::abort();
    const TopoNode& a = t->nodes[static_cast<size_t>(l.a_node)];
    const TopoNode& b = t->nodes[static_cast<size_t>(l.b_node)];
    if (l.a_port < 1 || l.a_port > a.num_ports || l.b_port < 1 || l.b_port > b.num_ports) std::abort();
    const TopoPort& ap = a.ports[l.a_port];
    const TopoPort& bp = b.ports[l.b_port];
    if (!ap.cabled || !bp.cabled || ap.remote_node != l.b_node || ap.remote_port != l.b_port ||
        bp.remote_node != l.a_node || bp.remote_port != l.a_port)
      std::abort();
  }
  return 0;
}
