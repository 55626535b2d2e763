// Topology parser (topology.hpp; docs/ibfabric.md "Topology format").
// Facts of the format learnt from ibnetdiscover(8) and from how ibsim reads
// its net files: a record is a header line and the port lines after it
// (comment lines may sit between them; any other line ends the record);
// a remote port without "[n]" is port 1; "w=" "s=" "e=" are the PortInfo
// LinkWidthEnabled / LinkSpeedEnabled / LinkSpeedExtEnabled values;
// "switchguid=" / "caguid=" / "rtguid=" set the GUID of the next node of the
// kind, later nodes of that kind counting on from it (a switch takes one
// GUID, a CA or router 1 + its ports); "vendid=" and "sysimgguid=" apply to
// the next node only, "devid=" to all later ones; other lines are ignored.
#include "sim/fabric/topology.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <map>
#include <set>

namespace openib::sim::fabric {

const char* node_kind_name(NodeKind k) {
  switch (k) {
    case NodeKind::kCa: return "Ca";
    case NodeKind::kSwitch: return "Switch";
    case NodeKind::kRouter: return "Rt";
  }
  return "?";
}

std::uint64_t TopoNode::port_guid(unsigned port) const {
  if (is_switch()) return guid;
  if (port < ports.size() && ports[port].guid) return *ports[port].guid;
  return guid + port;
}

int Topology::find(std::string_view name) const {
  for (size_t i = 0; i < nodes.size(); ++i)
    if (nodes[i].name == name) return static_cast<int>(i);
  return -1;
}

std::size_t Topology::count(NodeKind k) const {
  return static_cast<size_t>(std::count_if(nodes.begin(), nodes.end(), [k](const TopoNode& n) { return n.kind == k; }));
}

namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f'; }
bool is_hex(char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; }

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

bool starts_with_word(std::string_view s, std::string_view w) {
  return s.size() > w.size() && s.substr(0, w.size()) == w && is_space(s[w.size()]);
}

// A C-style unsigned number: 0x.. hex, else decimal (a leading 0 is decimal
// too: port numbers like "[08]" are not octal). Consumes what it reads.
std::optional<std::uint64_t> take_number(std::string_view& s, bool hex_only = false) {
  int base = 10;
  std::string_view d = s;
  if (d.size() > 2 && d[0] == '0' && (d[1] == 'x' || d[1] == 'X')) {
    base = 16;
    d.remove_prefix(2);
  } else if (hex_only) {
    base = 16;
  }
  std::uint64_t v = 0;
  auto [p, ec] = std::from_chars(d.data(), d.data() + d.size(), v, base);
  if (ec != std::errc() || p == d.data()) return std::nullopt;
  s.remove_prefix(static_cast<size_t>(p - s.data()));
  return v;
}

void skip_space(std::string_view& s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
}

// "text" -> text; consumes through the closing quote.
std::optional<std::string_view> take_quoted(std::string_view& s) {
  if (s.empty() || s.front() != '"') return std::nullopt;
  const size_t end = s.find('"', 1);
  if (end == std::string_view::npos) return std::nullopt;
  std::string_view v = s.substr(1, end - 1);
  s.remove_prefix(end + 1);
  return v;
}

// "(hexguid)" -> guid; nullopt (nothing consumed) if s does not start with '('.
// Sets bad if it does but is not a GUID.
std::optional<std::uint64_t> take_paren_guid(std::string_view& s, bool& bad) {
  if (s.empty() || s.front() != '(') return std::nullopt;
  std::string_view t = s.substr(1);
  auto v = take_number(t, true);
  if (!v || t.empty() || t.front() != ')') {
    bad = true;
    return std::nullopt;
  }
  s = t.substr(1);
  return v;
}

// "NxSPEED" at the end of an ibnetdiscover connection comment (ibnetdiscover
// prints the active width and speed) -> LinkWidthEnabled / LinkSpeedEnabled /
// LinkSpeedExtEnabled as ibsim derives them (enabled = all up to the active).
bool width_speed_token(std::string_view tok, std::uint8_t& w, std::uint8_t& s, std::uint8_t& e) {
  const size_t x = tok.find('x');
  if (x == std::string_view::npos || x == 0) return false;
  std::string_view num = tok.substr(0, x);
  auto n = take_number(num);
  if (!n || !num.empty()) return false;
  switch (*n) {  // IBA 14.2.5.6 LinkWidthEnabled bits: 1 1x, 2 4x, 4 8x, 8 12x, 16 2x
    case 1: w = 1; break;
    case 2: w = 16; break;
    case 4: w = 3; break;
    case 8: w = 4; break;
    case 12: w = 11; break;
    default: return false;
  }
  const std::string_view sp = tok.substr(x + 1);
  e = 0;
  if (sp == "SDR") s = 1;
  else if (sp == "DDR") s = 3;
  else if (sp == "QDR" || sp == "FDR10") s = 7;
  else if (sp == "FDR") s = 7, e = 1;  // LinkSpeedExtEnabled bits: 1 FDR, 2 EDR, 4 HDR, 8 NDR
  else if (sp == "EDR") s = 7, e = 3;
  else if (sp == "HDR") s = 7, e = 7;
  else if (sp == "NDR") s = 7, e = 15;
  else return false;
  return true;
}

struct Parser {
  explicit Parser(const ParseOptions& o) : opts(o) {}
  const ParseOptions& opts;
  Topology topo;
  // Per-kind GUID counters (index NodeKind), set by switchguid= etc.
  std::optional<std::uint64_t> next_guid[4];
  std::optional<std::uint32_t> vendid;  // next node only
  std::uint16_t devid = 0;              // sticky
  std::optional<std::uint64_t> sysimgguid;
  std::uint8_t def_width = 0, def_speed = 0, def_speed_ext = 0;
  int current = -1;  // node whose record is open
  int depth = 0;

  Error fail(const std::string& src, int line, const std::string& what) {
    return err(EINVAL, "{}:{}: {}", src, line, what);
  }

  Result<void> parse(std::string_view text, const std::string& src) {
    int lineno = 0;
    while (!text.empty() || lineno == 0) {
      ++lineno;
      size_t nl = text.find('\n');
      std::string_view raw = text.substr(0, nl);
      text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
      if (raw.find('\0') != std::string_view::npos) return fail(src, lineno, "NUL byte in line");
      std::string_view line = trim(raw);
      if (line.empty()) {
        current = -1;  // a blank line ends the record
      } else if (line.front() == '#') {
        // comment; does not end a record
      } else if (line.front() == '[') {
        OPENIB_TRY(port_line(line, src, lineno));
      } else if (line.front() == '@') {
        return fail(src, lineno, "port aliases ('@') are not supported");
      } else {
        current = -1;
        OPENIB_TRY(top_line(line, src, lineno));
      }
      if (nl == std::string_view::npos) break;
    }
    return ok();
  }

  Result<void> top_line(std::string_view line, const std::string& src, int lineno) {
    if (starts_with_word(line, "Switch")) return header(NodeKind::kSwitch, line.substr(6), src, lineno);
    if (starts_with_word(line, "Hca")) return header(NodeKind::kCa, line.substr(3), src, lineno);
    if (starts_with_word(line, "Ca")) return header(NodeKind::kCa, line.substr(2), src, lineno);
    if (starts_with_word(line, "Rt")) return header(NodeKind::kRouter, line.substr(2), src, lineno);
    struct Kw {
      std::string_view word;
      int kind;  // >0: a guid line for that NodeKind
    };
    static constexpr Kw guid_words[] = {{"switchguid", 2}, {"hcaguids", 1}, {"caguid", 1}, {"rtguid", 3}};
    for (const Kw& k : guid_words) {
      if (line.substr(0, k.word.size()) != k.word) continue;
      std::string_view v = trim(line.substr(k.word.size()));
      const bool relative = !v.empty() && v.front() == '+';
      if (v.empty() || (v.front() != '=' && !relative))
        return fail(src, lineno, fmt::format("{}: expected '=' or '+'", k.word));
      v = trim(v.substr(1));
      auto g = take_number(v);
      if (!g) return fail(src, lineno, fmt::format("{}: bad GUID", k.word));
      auto& slot = next_guid[k.kind];
      if (relative) {
        if (!slot) return fail(src, lineno, fmt::format("{}+: no base GUID set before", k.word));
        slot = *slot + *g;
      } else {
        slot = *g;
      }
      return ok();
    }
    auto assigned = [&](std::string_view word) -> Result<std::uint64_t> {
      std::string_view v = trim(line.substr(word.size()));
      if (v.empty() || v.front() != '=') return fail(src, lineno, fmt::format("{}: expected '='", word));
      v = trim(v.substr(1));
      auto n = take_number(v);
      if (!n) return fail(src, lineno, fmt::format("{}: bad number", word));
      return *n;
    };
    if (line.substr(0, 6) == "vendid") {
      OPENIB_TRY_ASSIGN(auto v, assigned("vendid"));
      if (v > 0xFFFFFF) return fail(src, lineno, "vendid: more than 24 bits");
      vendid = static_cast<std::uint32_t>(v);
      return ok();
    }
    if (line.substr(0, 5) == "devid") {
      OPENIB_TRY_ASSIGN(auto v, assigned("devid"));
      if (v > 0xFFFF) return fail(src, lineno, "devid: more than 16 bits");
      devid = static_cast<std::uint16_t>(v);
      return ok();
    }
    if (line.substr(0, 10) == "sysimgguid") {
      OPENIB_TRY_ASSIGN(sysimgguid, assigned("sysimgguid"));
      return ok();
    }
    if (line.substr(0, 8) == "extspeed") {
      OPENIB_TRY_ASSIGN(auto v, assigned("extspeed"));
      if (v > 15) return fail(src, lineno, "extspeed: 0..15");
      def_speed_ext = static_cast<std::uint8_t>(v);
      return ok();
    }
    if (line.substr(0, 5) == "width") {
      OPENIB_TRY_ASSIGN(auto v, assigned("width"));
      if (v < 1 || v > 31) return fail(src, lineno, "width: 1..31 (a LinkWidthEnabled mask)");
      def_width = static_cast<std::uint8_t>(v);
      return ok();
    }
    if (line.substr(0, 5) == "speed") {
      OPENIB_TRY_ASSIGN(auto v, assigned("speed"));
      if (v < 1 || v > 7) return fail(src, lineno, "speed: 1..7 (a LinkSpeedEnabled mask)");
      def_speed = static_cast<std::uint8_t>(v);
      return ok();
    }
    if (line.substr(0, 7) == "include") return include(line.substr(7), src, lineno);
    if (line.substr(0, 6) == "module") return fail(src, lineno, "module= (name prefixes) is not supported");
    if (line.substr(0, 2) == "do" && (line.size() == 2 || is_space(line[2]))) {
      topo.notes.push_back(fmt::format("{}:{}: ignored ibsim console command: {}", src, lineno, line));
      return ok();
    }
    topo.notes.push_back(fmt::format("{}:{}: ignored: {}", src, lineno, line));
    return ok();
  }

  Result<void> include(std::string_view rest, const std::string& src, int lineno) {
    rest = trim(rest);
    auto name = take_quoted(rest);
    if (!name || name->empty()) return fail(src, lineno, "include: expected \"file\"");
    if (!opts.include) return fail(src, lineno, "include is not available here");
    if (depth >= opts.max_include_depth) return fail(src, lineno, "include nested too deep");
    auto text = opts.include(std::string(*name));
    if (!text) return err(text.error().code, "{}:{}: include \"{}\": {}", src, lineno, *name, text.error().message);
    ++depth;
    auto r = parse(*text, std::string(*name));
    --depth;
    current = -1;
    return r;
  }

  // "<ws> N <ws> "name" [# "desc" | # desc] [enhanced|base port 0] [lid N] [lmc N]"
  Result<void> header(NodeKind kind, std::string_view s, const std::string& src, int lineno) {
    skip_space(s);
    auto n = take_number(s);
    if (!n) return fail(src, lineno, fmt::format("{}: expected the number of ports", node_kind_name(kind)));
    if (*n < 1 || *n > kMaxNodePorts)
      return fail(src, lineno, fmt::format("{}: {} ports (1..{})", node_kind_name(kind), *n, kMaxNodePorts));
    skip_space(s);
    auto name = take_quoted(s);
    if (!name) return fail(src, lineno, fmt::format("{}: expected a quoted node id", node_kind_name(kind)));
    if (name->empty()) return fail(src, lineno, "empty node id");
    if (topo.find(*name) >= 0)
      return fail(src, lineno, fmt::format("node \"{}\" already defined (line {})", *name,
                                           topo.nodes[static_cast<size_t>(topo.find(*name))].line));
    TopoNode node;
    node.kind = kind;
    node.name = std::string(*name);
    node.num_ports = static_cast<unsigned>(*n);
    node.line = lineno;
    skip_space(s);
    std::string_view desc = *name;
    if (!s.empty() && s.front() == '#') {
      s.remove_prefix(1);
      skip_space(s);
      if (!s.empty() && s.front() == '"') {
        auto d = take_quoted(s);
        if (!d) return fail(src, lineno, "unterminated node description");
        desc = *d;
      } else {
        // Unquoted: up to the first of the keywords ibnetdiscover appends.
        size_t cut = s.size();
        for (std::string_view k : {" enhanced port ", " base port ", " lid ", " lmc "})
          cut = std::min(cut, s.find(k));
        desc = trim(s.substr(0, cut));
        s.remove_prefix(cut);
      }
      if (s.find("enhanced port 0") != std::string_view::npos) node.enhanced_port0 = true;
      if (auto p = s.find("lid "); p != std::string_view::npos) {
        std::string_view t = s.substr(p + 4);
        auto lid = take_number(t);
        if (!lid || *lid > 0xFFFF) return fail(src, lineno, "bad lid");
        node.lid = static_cast<std::uint16_t>(*lid);
      }
      if (auto p = s.find("lmc "); p != std::string_view::npos) {
        std::string_view t = s.substr(p + 4);
        auto lmc = take_number(t);
        if (!lmc || *lmc > 7) return fail(src, lineno, "bad lmc (0..7)");
        node.lmc = static_cast<std::uint8_t>(*lmc);
      }
    } else if (!s.empty()) {
      return fail(src, lineno, fmt::format("unexpected text after the node id: {}", s));
    }
    if (desc.empty()) desc = *name;
    if (desc.size() > kMaxNodeDescription)
      return fail(src, lineno, fmt::format("node description longer than {} bytes", kMaxNodeDescription));
    node.description = std::string(desc);

    // GUIDs (see the file comment): the file's counter for the kind, else the name.
    auto& next = next_guid[static_cast<int>(kind)];
    if (next) {
      node.guid = *next;
      *next += kind == NodeKind::kSwitch ? 1 : node.num_ports + 1;
    } else {
      node.guid = guid_for_name(node.name);
    }
    node.sys_image_guid = sysimgguid.value_or(node.guid);
    node.vendor_id = vendid.value_or(0);
    node.device_id = devid;
    sysimgguid.reset();
    vendid.reset();

    node.ports.resize(node.num_ports + 1);
    for (auto& p : node.ports) {
      p.width_enabled = def_width;
      p.speed_enabled = def_speed;
      p.speed_ext_enabled = def_speed_ext;
    }
    topo.nodes.push_back(std::move(node));
    current = static_cast<int>(topo.nodes.size() - 1);
    return ok();
  }

  // "[N](guid)? "remote"[M]?(guid)? options... # comment"
  Result<void> port_line(std::string_view s, const std::string& src, int lineno) {
    if (current < 0) return fail(src, lineno, "port line outside a node record");
    TopoNode& node = topo.nodes[static_cast<size_t>(current)];
    s.remove_prefix(1);
    auto pn = take_number(s);
    if (!pn || s.empty() || s.front() != ']') return fail(src, lineno, "expected [port]");
    s.remove_prefix(1);
    if (*pn == 0) return fail(src, lineno, "port 0 cannot be cabled");
    if (*pn > node.num_ports)
      return fail(src, lineno, fmt::format("port {} out of range: \"{}\" has {} ports", *pn, node.name, node.num_ports));
    TopoPort& port = node.ports[*pn];
    if (port.line != 0)
      return fail(src, lineno, fmt::format("port {} of \"{}\" already given on line {}", *pn, node.name, port.line));
    bool bad = false;
    if (auto g = take_paren_guid(s, bad)) {
      if (node.is_switch()) return fail(src, lineno, "a switch port has no GUID of its own");
      port.guid = *g;
    }
    if (bad) return fail(src, lineno, "bad (port GUID)");
    skip_space(s);
    auto remote = take_quoted(s);
    if (!remote || remote->empty()) return fail(src, lineno, "expected a quoted remote node id");
    std::uint64_t rport = 1;  // ibsim: no [n] means port 1
    if (!s.empty() && s.front() == '[') {
      s.remove_prefix(1);
      auto r = take_number(s);
      if (!r || s.empty() || s.front() != ']') return fail(src, lineno, "expected [remote port]");
      s.remove_prefix(1);
      if (*r < 1 || *r > kMaxNodePorts) return fail(src, lineno, fmt::format("remote port {} out of range", *r));
      rport = *r;
    }
    (void)take_paren_guid(s, bad);  // the remote's port GUID: informational
    if (bad) return fail(src, lineno, "bad (remote port GUID)");

    // Options before any comment; ibnetdiscover's comment after '#'.
    const size_t hash = s.find('#');
    std::string_view optpart = s.substr(0, hash);
    std::string_view comment = hash == std::string_view::npos ? std::string_view{} : s.substr(hash + 1);
    while (true) {
      skip_space(optpart);
      if (optpart.empty()) break;
      size_t end = 0;
      while (end < optpart.size() && !is_space(optpart[end])) ++end;
      std::string_view tok = optpart.substr(0, end);
      optpart.remove_prefix(end);
      if (tok.size() < 3 || tok[1] != '=') return fail(src, lineno, fmt::format("bad port option \"{}\"", tok));
      std::string_view v = tok.substr(2);
      auto n = take_number(v);
      if (!n || !v.empty()) return fail(src, lineno, fmt::format("bad port option value \"{}\"", tok));
      switch (tok[0]) {
        case 'w':
          if (*n < 1 || *n > 31) return fail(src, lineno, "w=: 1..31 (a LinkWidthEnabled mask)");
          port.width_enabled = static_cast<std::uint8_t>(*n);
          break;
        case 's':
          if (*n > 7) return fail(src, lineno, "s=: 1..7 (a LinkSpeedEnabled mask; 0: QDR)");
          port.speed_enabled = static_cast<std::uint8_t>(*n == 0 ? 4 : *n);
          break;
        case 'e':
          if (*n > 15) return fail(src, lineno, "e=: 0..15 (a LinkSpeedExtEnabled mask)");
          port.speed_ext_enabled = static_cast<std::uint8_t>(*n);
          break;
        default:
          return fail(src, lineno, fmt::format("unknown port option \"{}\"", tok));
      }
    }
    comment = trim(comment);
    if (!comment.empty()) {
      // CA port: "lid N lmc M "desc" lid N 4xSDR"; the part before the first quote is ours.
      if (!node.is_switch()) {
        std::string_view own = comment.substr(0, comment.find('"'));
        if (auto p = own.find("lid "); p != std::string_view::npos) {
          std::string_view t = own.substr(p + 4);
          if (auto lid = take_number(t); lid && *lid <= 0xFFFF) port.lid = static_cast<std::uint16_t>(*lid);
        }
        if (auto p = own.find("lmc "); p != std::string_view::npos) {
          std::string_view t = own.substr(p + 4);
          if (auto lmc = take_number(t); lmc && *lmc <= 7) port.lmc = static_cast<std::uint8_t>(*lmc);
        }
      }
      const size_t last = comment.find_last_of(" \t");
      std::string_view tok = last == std::string_view::npos ? comment : comment.substr(last + 1);
      std::uint8_t w = 0, sp = 0, e = 0;
      if (width_speed_token(tok, w, sp, e)) {
        port.width_enabled = w;
        port.speed_enabled = sp;
        port.speed_ext_enabled = e;
      }
    }
    port.cabled = true;
    port.remote_port = static_cast<std::uint8_t>(rport);
    port.line = lineno;
    pending.push_back({current, static_cast<std::uint8_t>(*pn), std::string(*remote), src});
    return ok();
  }

  struct Pending {
    int node;
    std::uint8_t port;
    std::string remote;
    std::string src;
  };
  std::vector<Pending> pending;

  // Resolves remote names, checks both ends agree, fills in one-sided links.
  Result<void> connect() {
    for (const Pending& p : pending) {
      TopoNode& a = topo.nodes[static_cast<size_t>(p.node)];
      TopoPort& ap = a.ports[p.port];
      const int bi = topo.find(p.remote);
      if (bi < 0)
        return fail(p.src, ap.line, fmt::format("\"{}\" port {}: remote node \"{}\" is not defined", a.name, p.port, p.remote));
      ap.remote_node = bi;
      TopoNode& b = topo.nodes[static_cast<size_t>(bi)];
      if (ap.remote_port > b.num_ports)
        return fail(p.src, ap.line, fmt::format("\"{}\" port {}: remote port {} out of range: \"{}\" has {} ports", a.name,
                                                p.port, ap.remote_port, b.name, b.num_ports));
      if (bi == p.node && ap.remote_port == p.port)
        return fail(p.src, ap.line, fmt::format("\"{}\" port {} is cabled to itself", a.name, p.port));
    }
    for (const Pending& p : pending) {
      const TopoNode& a = topo.nodes[static_cast<size_t>(p.node)];
      const TopoPort& ap = a.ports[p.port];
      TopoNode& b = topo.nodes[static_cast<size_t>(ap.remote_node)];
      TopoPort& bp = b.ports[ap.remote_port];
      if (bp.line != 0) {  // written at both ends: they must agree
        if (bp.remote_node != p.node || bp.remote_port != p.port) {
          const std::string other = bp.remote_node >= 0 ? topo.nodes[static_cast<size_t>(bp.remote_node)].name : "?";
          return fail(p.src, ap.line,
                      fmt::format("\"{}\" port {} says \"{}\"[{}], but \"{}\" port {} (line {}) says \"{}\"[{}]", a.name,
                                  p.port, b.name, ap.remote_port, b.name, ap.remote_port, bp.line, other, bp.remote_port));
        }
        if (std::make_pair(p.node, p.port) < std::make_pair(ap.remote_node, ap.remote_port))
          topo.links.push_back({p.node, p.port, ap.remote_node, ap.remote_port});
        continue;
      }
      if (bp.cabled)  // filled in by another one-sided line
        return fail(p.src, ap.line,
                    fmt::format("\"{}\" port {} is already cabled to \"{}\" port {}", b.name, ap.remote_port,
                                topo.nodes[static_cast<size_t>(bp.remote_node)].name, bp.remote_port));
      bp.cabled = true;
      bp.remote_node = p.node;
      bp.remote_port = p.port;
      topo.links.push_back({p.node, p.port, ap.remote_node, ap.remote_port});
    }
    // GUIDs must be unique: node GUIDs and CA/router port GUIDs.
    std::map<std::uint64_t, std::string> seen;
    auto claim = [&](std::uint64_t g, const TopoNode& n, const std::string& what) -> Result<void> {
      auto [it, fresh] = seen.emplace(g, fmt::format("\"{}\" {}", n.name, what));
      if (!fresh && it->second != fmt::format("\"{}\" {}", n.name, what))
        return fail(opts.source, n.line, fmt::format("GUID {:#018x} of \"{}\" {} is also {}", g, n.name, what, it->second));
      return ok();
    };
    for (const TopoNode& n : topo.nodes) {
      OPENIB_TRY(claim(n.guid, n, "node"));
      if (!n.is_switch())
        for (unsigned i = 1; i <= n.num_ports; ++i) OPENIB_TRY(claim(n.port_guid(i), n, fmt::format("port {}", i)));
    }
    return ok();
  }
};

}  // namespace

std::uint64_t guid_for_name(std::string_view name) {
  if (name.size() == 18 && (name[0] == 'S' || name[0] == 'H' || name[0] == 'R') && name[1] == '-' &&
      std::all_of(name.begin() + 2, name.end(), is_hex)) {
    std::string_view d = name.substr(2);
    if (auto v = take_number(d, true)) return *v;
  }
  std::uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a 64
  for (char c : name) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001b3ull;
  }
  return 0x0200000000000000ull | (h & 0x0000FFFFFFFFFF00ull);
}

Result<Topology> parse_topology(std::string_view text, const ParseOptions& opts) {
  Parser p{opts};
  OPENIB_TRY(p.parse(text, opts.source));
  if (p.topo.nodes.empty()) return err(EINVAL, "{}: no nodes (Switch/Ca/Hca lines)", opts.source);
  OPENIB_TRY(p.connect());
  return std::move(p.topo);
}

}  // namespace openib::sim::fabric
