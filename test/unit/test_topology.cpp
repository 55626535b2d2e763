// ibfabric's topology parser (src/sim/fabric/topology.hpp, docs/ibfabric.md
// "Topology format"): every example net file Debian's ibsim-utils ships
// loads as it is, with the nodes and cables it describes; ibnetdiscover's
// output form (GUID lines, port GUIDs, comments with LIDs and width/speed)
// loads with the GUIDs it names; broken files give line-numbered errors.
#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>
#include <string>

#include "sim/fabric/topology.hpp"

using namespace openib::sim::fabric;

namespace {

const std::string kExamples = "/usr/share/doc/ibsim-utils/net-examples/";

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  REQUIRE(f.good());  // ibsim-utils is installed by scripts/setup.sh
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

Topology load(const std::string& name) {
  ParseOptions o;
  o.source = name;
  auto t = parse_topology(slurp(kExamples + name), o);
  INFO(name << ": " << (t ? "" : t.error().str()));
  REQUIRE(t.ok());
  return std::move(t).value();
}

// The far end of `node`'s port `port` as "name[port]".
std::string peer(const Topology& t, const std::string& node, unsigned port) {
  const TopoNode& n = t.nodes[static_cast<size_t>(t.find(node))];
  const TopoPort& p = n.ports.at(port);
  if (!p.cabled) return "-";
  return t.nodes[static_cast<size_t>(p.remote_node)].name + "[" + std::to_string(p.remote_port) + "]";
}

std::string parse_error(const std::string& text) {
  ParseOptions o;
  o.source = "t.net";
  auto t = parse_topology(text, o);
  if (t.ok()) return "(parsed)";
  CHECK(t.error().code == EINVAL);
  return t.error().message;
}

}  // namespace

TEST_CASE("topology: the ibsim-utils example nets load as they are", "[topology]") {
  struct Expect {
    const char* file;
    size_t switches, cas, links;
  };
  for (const Expect& e : {Expect{"net", 2, 2, 4}, Expect{"net.1", 1, 2, 2}, Expect{"net.2sw2path", 2, 2, 4},
                          Expect{"net.2sw2path4hca", 2, 4, 6}, Expect{"net.2sw2path4hca2port", 2, 2, 6}}) {
    INFO(e.file);
    Topology t = load(e.file);
    CHECK(t.count(NodeKind::kSwitch) == e.switches);
    CHECK(t.count(NodeKind::kCa) == e.cas);
    CHECK(t.links.size() == e.links);
  }
}

TEST_CASE("topology: net.2sw2path4hca cables and node attributes", "[topology]") {
  Topology t = load("net.2sw2path4hca");
  REQUIRE(t.nodes.size() == 6);
  CHECK(peer(t, "Switch1", 1) == "Hca1[1]");
  CHECK(peer(t, "Switch1", 2) == "Hca3[1]");
  CHECK(peer(t, "Switch1", 3) == "Switch2[3]");
  CHECK(peer(t, "Switch1", 5) == "Switch2[5]");
  CHECK(peer(t, "Switch1", 4) == "-");
  CHECK(peer(t, "Switch2", 2) == "Hca4[1]");
  CHECK(peer(t, "Hca4", 1) == "Switch2[2]");  // "Hca \t2" header with a space before the tab
  CHECK(peer(t, "Hca4", 2) == "-");
  const TopoNode& sw = t.nodes[static_cast<size_t>(t.find("Switch1"))];
  CHECK(sw.is_switch());
  CHECK(sw.num_ports == 8);
  CHECK(sw.ports.size() == 9);  // port 0 too
  CHECK(sw.description == "Switch1");  // no "# desc": NodeDescription is the name
  CHECK(sw.guid == guid_for_name("Switch1"));
  const TopoNode& h = t.nodes[static_cast<size_t>(t.find("Hca1"))];
  CHECK(h.num_ports == 2);
  CHECK(h.port_guid(1) == h.guid + 1);
  CHECK(sw.port_guid(3) == sw.guid);
  // Deterministic, distinct, locally administered, low byte free for ports.
  CHECK(guid_for_name("Switch1") == guid_for_name("Switch1"));
  CHECK(guid_for_name("Switch1") != guid_for_name("Switch2"));
  CHECK((guid_for_name("Hca1") >> 56) == 0x02);
  CHECK((guid_for_name("Hca1") & 0xFF) == 0);
}

TEST_CASE("topology: ibnetdiscover output", "[topology]") {
  const std::string text = R"(#
# Topology file: generated on Tue Jun  5 14:15:10 2007
#
# Initiated from node 0008f10403960558 port 0008f10403960559

Non-Chassis Nodes

vendid=0x8f1
devid=0x5a06
sysimgguid=0x5442ba00003000
switchguid=0x5442ba00003080(5442ba00003080)
Switch	24 "S-005442ba00003080"		# "ISR9024 Voltaire" base port 0 lid 6 lmc 0
[22]	"H-0008f10403961354"[1](8f10403961355)		# "MT23108 InfiniHost Mellanox Technologies" lid 4 4xSDR
[10]	"S-0008f10400410015"[1]		# "SW-6IB4 Voltaire" lid 3 4xDDR

vendid=0x8f1
devid=0x5a05
switchguid=0x8f10400410015(8f10400410015)
Switch	8 "S-0008f10400410015"		# "SW-6IB4 Voltaire" enhanced port 0 lid 3 lmc 0
[1]	"S-005442ba00003080"[10]		# "ISR9024 Voltaire" lid 6 4xDDR

vendid=0x2c9
devid=0x5a44
caguid=0x8f10403961354
Ca	2 "H-0008f10403961354"		# "MT23108 InfiniHost Mellanox Technologies"
[1](8f10403961355) 	"S-005442ba00003080"[22]		# lid 4 lmc 1 "ISR9024 Voltaire" lid 6 12xQDR
)";
  auto r = parse_topology(text);
  INFO((r ? "" : r.error().str()));
  REQUIRE(r.ok());
  const Topology& t = *r;
  REQUIRE(t.nodes.size() == 3);
  CHECK(t.links.size() == 2);
  const TopoNode& s1 = t.nodes[0];
  CHECK(s1.kind == NodeKind::kSwitch);
  CHECK(s1.guid == 0x5442ba00003080ull);
  CHECK(s1.sys_image_guid == 0x5442ba00003000ull);
  CHECK(s1.vendor_id == 0x8f1);
  CHECK(s1.device_id == 0x5a06);
  CHECK(s1.description == "ISR9024 Voltaire");
  CHECK(s1.lid == 6);
  CHECK_FALSE(s1.enhanced_port0);
  CHECK(s1.ports[22].width_enabled == 3);  // 4x: 1x|4x enabled
  CHECK(s1.ports[22].speed_enabled == 1);  // SDR
  CHECK(s1.ports[10].speed_enabled == 3);  // DDR: SDR|DDR
  const TopoNode& s2 = t.nodes[1];
  CHECK(s2.guid == 0x8f10400410015ull);
  CHECK(s2.sys_image_guid == s2.guid);  // sysimgguid= applied to the previous node only
  CHECK(s2.enhanced_port0);
  CHECK(s2.lid == 3);
  const TopoNode& ca = t.nodes[2];
  CHECK(ca.kind == NodeKind::kCa);
  CHECK(ca.guid == 0x8f10403961354ull);
  CHECK(ca.port_guid(1) == 0x8f10403961355ull);
  CHECK(ca.ports[1].lid == 4);
  CHECK(ca.ports[1].lmc == 1);
  CHECK(ca.ports[1].width_enabled == 11);  // 12x: 1x|4x|12x
  CHECK(ca.ports[1].speed_enabled == 7);
  CHECK(peer(t, "H-0008f10403961354", 1) == "S-005442ba00003080[22]");
  CHECK(!t.notes.empty());  // "Non-Chassis Nodes" noted as ignored
}

TEST_CASE("topology: ibsim options, one-sided links, GUID counters", "[topology]") {
  auto r = parse_topology(R"(switchguid=0x100
Switch 4 "A"
[1] "B"[2] w=2 s=4
[2] "h1"
[3] "B"[3]

Switch 4 "B"
# comment inside the next record's place
caguid=0x1000
Hca 2 "h1"
Hca 2 "h2"
[2] "B"[4]
)");
  INFO((r ? "" : r.error().str()));
  REQUIRE(r.ok());
  const Topology& t = *r;
  CHECK(t.links.size() == 4);
  CHECK(peer(t, "B", 2) == "A[1]");  // written at A's end only
  CHECK(peer(t, "h1", 1) == "A[2]");  // no [n]: remote port 1
  CHECK(peer(t, "B", 4) == "h2[2]");
  const TopoNode& a = t.nodes[static_cast<size_t>(t.find("A"))];
  CHECK(a.guid == 0x100);
  CHECK(t.nodes[static_cast<size_t>(t.find("B"))].guid == 0x101);  // counting on
  CHECK(t.nodes[static_cast<size_t>(t.find("h1"))].guid == 0x1000);
  CHECK(t.nodes[static_cast<size_t>(t.find("h2"))].guid == 0x1003);  // 1 + 2 ports reserved
  CHECK(a.ports[1].width_enabled == 2);
  CHECK(a.ports[1].speed_enabled == 4);
}

TEST_CASE("topology: include through a loader", "[topology]") {
  ParseOptions o;
  o.source = "main.net";
  o.include = [](const std::string& name) -> openib::Result<std::string> {
    if (name == "hosts.net") return std::string("Ca 1 \"h\"\n[1] \"s\"[1]\n");
    return openib::err(ENOENT, "no such file");
  };
  auto r = parse_topology("Switch 2 \"s\"\n\ninclude \"hosts.net\"\n", o);
  INFO((r ? "" : r.error().str()));
  REQUIRE(r.ok());
  CHECK(r->links.size() == 1);
  auto bad = parse_topology("include \"missing.net\"\n", o);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().code == ENOENT);
  CHECK(bad.error().message.find("main.net:1") != std::string::npos);
  // Without a loader, include is an error, not a silent skip.
  CHECK(parse_error("include \"x\"\n").find("t.net:1:") == 0);
}

TEST_CASE("topology: malformed files give line-numbered errors", "[topology]") {
  struct Case {
    const char* text;
    const char* starts;
    const char* contains;
  };
  const Case cases[] = {
      {"Switch 8 \"S\"\n[9] \"H\"[1]\n\nHca 1 \"H\"\n", "t.net:2:", "port 9 out of range"},
      {"Switch 8 \"S\"\n[1] \"H\"[3]\n\nHca 2 \"H\"\n[1] \"S\"[1]\n", "t.net:2:", "out of range"},  // remote port 3 > 2
      {"Switch 8 \"S\"\n[1] \"H\"[2]\n\nHca 2 \"H\"\n[2] \"S\"[4]\n", "t.net:2:", "says"},  // ends disagree
      {"Switch 8 \"S\"\n[1] \"X\"[1]\n", "t.net:2:", "not defined"},
      {"Switch 8 \"S\"\n\nSwitch 4 \"S\"\n", "t.net:3:", "already defined (line 1)"},
      {"Switch 8 \"S\"\n[1] \"S\"[2]\n[1] \"S\"[3]\n", "t.net:3:", "already given on line 2"},
      {"Switch 8 \"S\"\n[1] \"S\"[1]\n", "t.net:2:", "cabled to itself"},
      {"Switch 0 \"S\"\n", "t.net:1:", "0 ports"},
      {"Switch 300 \"S\"\n", "t.net:1:", "300 ports"},
      {"Switch 8 S\n", "t.net:1:", "quoted node id"},
      {"Switch 8 \"S\n", "t.net:1:", "quoted node id"},
      {"\n\n[1] \"S\"[1]\n", "t.net:3:", "outside a node record"},
      {"Switch 8 \"S\"\n[0] \"H\"[1]\n", "t.net:2:", "port 0"},
      {"Switch 8 \"S\"\n[x] \"H\"[1]\n", "t.net:2:", "expected [port]"},
      {"Switch 8 \"S\"\n[1] \"H\"[1] w=99\n\nHca 1 \"H\"\n", "t.net:2:", "w=: 1..31"},
      {"Switch 8 \"S\"\n[1] \"H\"[1] q=1\n\nHca 1 \"H\"\n", "t.net:2:", "unknown port option"},
      {"Switch 8 \"S\"\n[1](12) \"H\"[1]\n\nHca 1 \"H\"\n", "t.net:2:", "no GUID of its own"},
      {"switchguid 5\n", "t.net:1:", "expected '='"},
      {"caguid=zz\n", "t.net:1:", "bad GUID"},
      {"vendid=0x1000000\n", "t.net:1:", "24 bits"},
      {"Switch 8 \"S\"\n@[1] \"a\"\n", "t.net:2:", "aliases"},
      {"module=\"x\"\n", "t.net:1:", "not supported"},
      {"# only a comment\n", "t.net:", "no nodes"},
      {"switchguid=0x10\nSwitch 2 \"A\"\nswitchguid=0x10\nSwitch 2 \"B\"\n", "t.net:4:", "also"},  // GUID reused
      {"Switch 8 \"S\"\n[1] \"H\"[1]\n[2] \"H\"[1]\n\nHca 1 \"H\"\n", "t.net:3:", "already cabled"},
  };
  for (const Case& c : cases) {
    INFO(c.text);
    const std::string e = parse_error(c.text);
    CHECK(e.rfind(c.starts, 0) == 0);
    CHECK(e.find(c.contains) != std::string::npos);
  }
}
