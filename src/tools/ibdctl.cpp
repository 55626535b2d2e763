// ibdctl: asks ibd for its INFO (docs/client-protocol.md "INFO") and prints
// it as tables, or as raw JSON with --json (docs/operations.md "ibdctl");
// `ibdctl path GID` asks ibd's path cache for a PathRecord (PATH_QUERY);
// `ibdctl paths` lists the cache (PATH_LIST), `ibdctl paths flush [GID]`
// empties it (PATH_FLUSH).
// `ibdctl mcast join`, `ibdctl service set` are in ibdctl_sa.cpp.
#include <arpa/inet.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "clientproto/devices.hpp"
#include "clientproto/socket.hpp"
#include "sa/path_record.hpp"
#include "tools/ibdctl.hpp"

using namespace openib;
using nlohmann::json;

namespace openib::ibdctl {

Result<UniqueFd> connect_to(const std::string& path) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  if (path.size() >= sizeof a.sun_path) return err(ENAMETOOLONG, "socket path {} too long", path);
  std::memcpy(a.sun_path, path.c_str(), path.size() + 1);
  UniqueFd fd(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  if (!fd) return sys_err("socket");
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0)
    return sys_err("connecting to {}", path);
  return fd;
}

Result<proto::Bytes> call(int fd, proto::Op op, uint32_t seq, const proto::Bytes& body) {
  proto::Header h;
  h.op = static_cast<uint16_t>(op);
  h.seq = seq;
  OPENIB_TRY(proto::send_message(fd, h, body));
  OPENIB_TRY_ASSIGN(proto::Message m, proto::recv_message(fd));
  if (m.header.op != (h.op | proto::kReplyBit) || m.header.seq != seq)
    return err(EPROTO, "reply to {} does not match the request", proto::op_name(h.op));
  OPENIB_TRY_ASSIGN(proto::ReplyView r, proto::decode_reply(m.body));
  if (r.status != 0)
    return err(r.status, "{}: {}", proto::op_name(h.op),
               std::string(reinterpret_cast<const char*>(r.payload.data()), r.payload.size()));
  return proto::Bytes(r.payload.begin(), r.payload.end());
}

}  // namespace openib::ibdctl

namespace {

using ibdctl::call;
using ibdctl::connect_to;

std::string cell(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_null()) return "-";
  return v.dump();
}

// Aligned columns: a header row, then one row per object of `rows`.
void table(const json& rows, const std::vector<std::string>& cols) {
  std::vector<size_t> w(cols.size());
  std::vector<std::vector<std::string>> cells;
  for (size_t i = 0; i < cols.size(); ++i) w[i] = cols[i].size();
  for (const auto& r : rows) {
    std::vector<std::string> line;
    for (size_t i = 0; i < cols.size(); ++i) {
      line.push_back(r.contains(cols[i]) ? cell(r[cols[i]]) : "-");
      w[i] = std::max(w[i], line.back().size());
    }
    cells.push_back(std::move(line));
  }
  auto print = [&](const std::vector<std::string>& line) {
    std::string out;
    for (size_t i = 0; i < line.size(); ++i) {
      std::string c = line[i];
      if (i + 1 < line.size()) c.resize(w[i] + 2, ' ');
      out += c;
    }
    std::printf("%s\n", out.c_str());
  };
  std::vector<std::string> head;
  for (const auto& c : cols) {
    std::string u = c;
    for (auto& ch : u) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    head.push_back(u);
  }
  print(head);
  for (const auto& l : cells) print(l);
}

void key_values(const json& obj) {
  size_t w = 0;
  for (auto it = obj.begin(); it != obj.end(); ++it) w = std::max(w, it.key().size());
  for (auto it = obj.begin(); it != obj.end(); ++it)
    std::printf("%-*s  %s\n", static_cast<int>(w), it.key().c_str(), cell(it.value()).c_str());
}

// PATH_QUERY for `gid` (IPv6 notation), printed as key: value lines.
int path_query(int fd, const std::string& gid, uint8_t port, uint16_t pkey, bool fresh, bool as_json) {
  proto::PathQueryReq req;
  req.port = port;
  req.pkey = pkey;
  req.flags = fresh ? proto::kPathFresh : 0;
  if (::inet_pton(AF_INET6, gid.c_str(), req.dgid.data()) != 1) {
    std::fprintf(stderr, "ibdctl: '%s' is not a GID (IPv6 notation, e.g. fe80::2:c903:0:1)\n", gid.c_str());
    return 2;
  }
  auto r = call(fd, proto::Op::kPathQuery, 2, proto::encode(req));
  if (!r) {
    std::fprintf(stderr, "ibdctl: %s\n", r.error().str().c_str());
    return 1;
  }
  auto rep = proto::decode<proto::PathRep>(*r);
  if (!rep) {
    std::fprintf(stderr, "ibdctl: PATH_QUERY reply: %s\n", rep.error().str().c_str());
    return 1;
  }
  auto pr = sa::decode_path_record(std::as_bytes(std::span(rep->record)));
  if (!pr) {
    std::fprintf(stderr, "ibdctl: PATH_QUERY reply: %s\n", pr.error().str().c_str());
    return 1;
  }
  auto gid_str = [](const sa::Gid& g) {
    char b[INET6_ADDRSTRLEN] = {};
    ::inet_ntop(AF_INET6, g.data(), b, sizeof b);
    return std::string(b);
  };
  json j = {{"source", rep->source == proto::kPathFromCache ? "cache" : "sa"},
            {"dgid", gid_str(pr->dgid)},
            {"sgid", gid_str(pr->sgid)},
            {"dlid", pr->dlid},
            {"slid", pr->slid},
            {"pkey", fmt::format("{:#06x}", pr->pkey)},
            {"sl", pr->sl},
            {"mtu", pr->mtu >= 1 && pr->mtu <= 5 ? 128 << pr->mtu : 0},
            {"rate", pr->rate},
            {"packet_life_time", pr->packet_life_time},
            {"reversible", pr->reversible},
            {"hop_limit", pr->hop_limit},
            {"tclass", pr->tclass}};
  if (as_json) std::printf("%s\n", j.dump().c_str());
  else key_values(j);
  return 0;
}

// PATH_LIST, page after page, into one JSON object {"total", "paths"}.
Result<json> path_list(int fd, uint8_t port) {
  json all = {{"paths", json::array()}};
  proto::PathListReq req;
  req.port = port;
  for (uint32_t seq = 2;; ++seq) {
    OPENIB_TRY_ASSIGN(auto text, call(fd, proto::Op::kPathList, seq, proto::encode(req)));
    json page = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions*/ false);
    if (page.is_discarded() || !page.contains("paths")) return err(EPROTO, "PATH_LIST reply is not its JSON");
    for (auto& p : page["paths"]) all["paths"].push_back(std::move(p));
    all["total"] = page["total"];
    if (!page["next"].is_number_unsigned() || page["next"].get<uint32_t>() <= req.start) break;
    req.start = page["next"].get<uint32_t>();
  }
  return all;
}

// `paths` (a table or --json) and `paths flush [GID]`.
int paths_command(int fd, const std::string& sub, const std::string& gid, uint8_t port, bool port_given,
                  bool as_json) {
  if (sub == "flush") {
    proto::PathFlushReq req;
    req.port = port_given ? port : 0;
    if (!gid.empty()) {
      if (::inet_pton(AF_INET6, gid.c_str(), req.dgid.data()) != 1) {
        std::fprintf(stderr, "ibdctl: '%s' is not a GID (IPv6 notation, e.g. fe80::2:c903:0:1)\n", gid.c_str());
        return 2;
      }
      req.flags = proto::kPathFlushDgid;
    }
    auto r = call(fd, proto::Op::kPathFlush, 2, proto::encode(req));
    auto rep = r ? proto::decode<proto::PathFlushRep>(*r) : Result<proto::PathFlushRep>(r.take_error());
    if (!rep) {
      std::fprintf(stderr, "ibdctl: %s\n", rep.error().str().c_str());
      return 1;
    }
    if (as_json) std::printf("%s\n", json{{"dropped", rep->dropped}}.dump().c_str());
    else std::printf("%u entries dropped\n", rep->dropped);
    return 0;
  }
  if (!sub.empty() || !gid.empty()) {
    std::fprintf(stderr, "ibdctl: 'paths' takes nothing, or 'flush [GID]'\n");
    return 2;
  }
  auto all = path_list(fd, port_given ? port : 0);
  if (!all) {
    std::fprintf(stderr, "ibdctl: %s\n", all.error().str().c_str());
    return 1;
  }
  if (as_json) {
    std::printf("%s\n", all->dump().c_str());
    return 0;
  }
  for (auto& p : (*all)["paths"]) p["age_s"] = p.value("age_ms", 0) / 1000;
  table((*all)["paths"], {"port", "dgid", "pkey", "dlid", "sl", "mtu", "rate", "state", "age_s"});
  return 0;
}

// `ipoib`: the interface, its neighbours and groups, its counters.
// A request whose reply is JSON text (INFO, IPOIB_INFO): printed raw with
// --json (returns nullopt and sets rc 0), else parsed; errors say so (rc 1).
std::optional<json> json_reply(int fd, proto::Op op, const proto::Bytes& body, bool as_json, int& rc) {
  auto text = call(fd, op, 2, body);
  rc = 1;
  if (!text) {
    std::fprintf(stderr, "ibdctl: %s\n", text.error().str().c_str());
    return std::nullopt;
  }
  const std::string s(reinterpret_cast<const char*>(text->data()), text->size());
  if (as_json) {
    std::printf("%s\n", s.c_str());
    rc = 0;
    return std::nullopt;
  }
  json j = json::parse(s, nullptr, /*allow_exceptions*/ false);
  if (j.is_discarded()) {
    std::fprintf(stderr, "ibdctl: %s reply is not JSON\n", proto::op_name(static_cast<uint16_t>(op)));
    return std::nullopt;
  }
  return j;
}

// `ipoib mode connected|datagram` (IPOIB_SET_MODE; root or CAP_NET_ADMIN).
int ipoib_mode_command(int fd, const std::string& mode) {
  if (mode != "connected" && mode != "datagram") {
    std::fprintf(stderr, "ibdctl: ipoib mode connected|datagram, not '%s'\n", mode.c_str());
    return 2;
  }
  proto::IpoibModeReq r;
  r.connected = mode == "connected";
  if (auto got = call(fd, proto::Op::kIpoibSetMode, 9, proto::encode(r)); !got) {
    std::fprintf(stderr, "ibdctl: %s\n", got.error().str().c_str());
    return 1;
  }
  std::printf("ipoib: %s mode\n", mode.c_str());
  return 0;
}

int ipoib_command(int fd, bool as_json) {
  int rc = 0;
  auto got = json_reply(fd, proto::Op::kIpoibInfo, {}, as_json, rc);
  if (!got) return rc;
  json& j = *got;
  json head = json::object();
  for (const char* k : {"name", "state", "mode", "ifindex", "mac", "mtu", "port", "pkey", "qpn", "qkey", "gid", "broadcast_mlid"})
    if (j.contains(k)) head[k] = j[k];
  key_values(head);
  std::printf("\nneighbours:\n");
  json rows = json::array();
  for (auto n : j.value("neighbours", json::array())) {
    std::string ips;
    for (const auto& ip : n.value("ips", json::array())) ips += (ips.empty() ? "" : ",") + ip.get<std::string>();
    n["ip"] = ips.empty() ? "-" : ips;
    rows.push_back(std::move(n));
  }
  table(rows, {"ip", "mac", "qpn", "gid", "path", "dlid", "pending"});
  std::printf("\ngroups:\n");
  table(j.value("groups", json::array()), {"mgid", "mlid", "full_member", "state"});
  std::printf("\ncounters:\n");
  key_values(j.value("counters", json::object()));
  return 0;
}

// `cm`: the connection manager (CM_INFO, docs/cm.md "In ibd"): sessions
// and ids, then per port whether the CM runs, its ids by state (IBA 12.9)
// and its message counters.
int cm_command(int fd, bool as_json) {
  int rc = 0;
  auto got = json_reply(fd, proto::Op::kCmInfo, {}, as_json, rc);
  if (!got) return rc;
  json& j = *got;
  json head = json::object();
  for (const char* k : {"sessions", "ids", "memory_bytes"})
    if (j.contains(k)) head[k] = j[k];
  key_values(head);
  std::printf("\nclients:\n");
  table(j.value("clients", json::array()), {"client", "ids", "queued", "open"});
  // The sum of an object's numbers (ids by state, messages by name).
  auto sum = [](const json& e, const char* key) {
    uint64_t n = 0;
    if (e.contains(key) && e[key].is_object())
      for (const auto& v : e[key])
        if (v.is_number_unsigned()) n += v.get<uint64_t>();
    return n;
  };
  const json ports_in = j.value("ports", json::array());
  json ports = json::array();
  for (const auto& p : ports_in) {
    json row = {{"port", p.value("port", json())}, {"running", p.value("running", false)}};
    if (p.contains("engine")) {
      const json& e = p["engine"];
      row["ids"] = sum(e, "ids_by_state");
      row["sent"] = sum(e, "sent");
      row["received"] = sum(e, "received");
      for (const char* k : {"retries", "timeouts", "duplicates", "stale", "send_errors"}) row[k] = e.value(k, json());
      row["dropped"] = sum(e, "dropped");
    }
    ports.push_back(std::move(row));
  }
  std::printf("\nports:\n");
  table(ports, {"port", "running", "ids", "sent", "received", "retries", "timeouts", "duplicates", "stale",
                "send_errors", "dropped"});
  for (const auto& p : ports_in) {
    if (!p.contains("engine")) continue;
    const json& e = p["engine"];
    json states = json::array(), msgs = json::array(), names = json::object();
    if (e.contains("ids_by_state"))
      for (const auto& [k, v] : e["ids_by_state"].items()) states.push_back({{"state", k}, {"ids", v}});
    for (const char* dir : {"sent", "received"})
      if (e.contains(dir))
        for (const auto& [k, v] : e[dir].items()) names[k][dir] = v;
    for (const auto& [k, v] : names.items())
      msgs.push_back({{"message", k}, {"sent", v.value("sent", json(0))}, {"received", v.value("received", json(0))}});
    std::printf("\nport %s ids by state:\n", cell(p["port"]).c_str());
    table(states, {"state", "ids"});
    std::printf("\nport %s messages:\n", cell(p["port"]).c_str());
    table(msgs, {"message", "sent", "received"});
  }
  return 0;
}

// enum rdma_port_space's names (docs/cma.md "Wire").
std::string port_space_name(unsigned ps) {
  switch (ps) {
    case proto::kRdmaPsTcp: return "tcp";
    case proto::kRdmaPsUdp: return "udp";
    case proto::kRdmaPsIb: return "ib";
    case proto::kRdmaPsIpoib: return "ipoib";
    default: return std::to_string(ps);
  }
}

// `cma`: the RDMA CM (CMA_INFO, docs/cma.md "In ibd"). Whatever CMA_INFO
// reports, generically: its numbers first, then each object as key/value
// lines and each list of objects as a table (the columns every row has).
int cma_command(int fd, bool as_json) {
  int rc = 0;
  auto got = json_reply(fd, proto::Op::kCmaInfo, {}, as_json, rc);
  if (!got) return rc;
  const json& j = *got;
  json head = json::object();
  for (const auto& [k, v] : j.items())
    if (!v.is_structured()) head[k] = v;
  key_values(head);
  for (const auto& [k, v] : j.items()) {
    if (v.is_object()) {
      std::printf("\n%s:\n", k.c_str());
      json flat = json::object();
      for (const auto& [k2, v2] : v.items()) flat[k2] = v2.is_structured() ? json(v2.dump()) : v2;
      key_values(flat);
    } else if (v.is_array()) {
      // An id's usual fields first, in this order; then the rest.
      std::vector<std::string> cols;
      for (const char* c : {"id", "client", "state", "ps", "port", "src", "dst", "qpn"})
        for (const auto& row : v)
          if (row.is_object() && row.contains(c)) {
            cols.push_back(c);
            break;
          }
      json rows = json::array();
      for (const auto& row : v) {
        if (!row.is_object()) continue;
        json r = row;
        for (const auto& [k2, v2] : row.items()) {
          if (std::find(cols.begin(), cols.end(), k2) == cols.end()) cols.push_back(k2);
          if (v2.is_string() && v2.get<std::string>().empty()) r[k2] = nullptr;  // "-"
        }
        if (r.contains("ps") && r["ps"].is_number_unsigned()) r["ps"] = port_space_name(r["ps"].get<unsigned>());
        rows.push_back(std::move(r));
      }
      std::printf("\n%s:\n", k.c_str());
      if (cols.empty()) {
        for (const auto& row : v) std::printf("%s\n", cell(row).c_str());
        continue;
      }
      table(rows, cols);
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // As libopenib and our libibumad: $OPENIB_SOCKET, else the default.
  const char* env_socket = std::getenv("OPENIB_SOCKET");
  std::string socket = env_socket && *env_socket ? env_socket : proto::kDefaultSocket;
  // `mcast` and `service`: joins and registrations (ibdctl_sa.cpp).
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--socket") ++i;  // its value
    if (a.starts_with("-")) continue;
    if (a == "mcast" || a == "service") return ibdctl::sa_member_main(argc, argv, socket);
    break;
  }
  std::string what = "devices";
  bool as_json = false;
  CLI::App app{"ibdctl: status of ibd (devices, ports, clients, objects, counters)"};
  app.add_option("--socket", socket, "ibd's client socket")->capture_default_str();
  const char* env_device = std::getenv("OPENIB_DEVICE");
  std::string device = env_device ? env_device : "";
  app.add_option("-d,--device", device, "the device, by name (default $OPENIB_DEVICE, else ibd's first)");
  app.add_flag("--json", as_json, "print INFO's raw JSON");
  std::string gid;
  unsigned port = 1, pkey = 0;
  bool fresh = false;
  app.add_option("what", what,
                 "devices | ports | clients | objects | counters | path GID | paths [flush [GID]] | "
                 "ipoib [mode connected|datagram] | cm | cma")
      ->check(CLI::IsMember({"devices", "ports", "clients", "objects", "counters", "path", "paths", "ipoib", "cm",
                             "cma"}))
      ->capture_default_str();
  std::string paths_sub, paths_gid;
  app.add_option("gid", gid, "path: the destination GID (IPv6 notation); paths: 'flush'");
  app.add_option("flush_gid", paths_gid, "paths flush: only this destination GID's entries");
  auto* port_opt = app.add_option("--port", port, "path: the local port; paths: only this port's entries")
                       ->capture_default_str()
                       ->check(CLI::Range(1, 255));
  app.add_option("--pkey", pkey, "path: the P_Key (0: the port's P_Key at index 0)")->check(CLI::Range(0, 0xffff));
  app.add_flag("--fresh", fresh, "path: ask the SA, not the cache");
  CLI11_PARSE(app, argc, argv);
  if (what == "paths") std::swap(paths_sub, gid);
  std::string ipoib_mode;
  if (what == "ipoib" && gid == "mode") {
    ipoib_mode = paths_gid.empty() ? "?" : paths_gid;
    gid.clear();
    paths_gid.clear();
  }
  if ((what == "path") != !gid.empty() || (what != "paths" && !paths_gid.empty())) {
    std::fprintf(stderr, "ibdctl: a GID goes with 'path', and only with it\n");
    return 2;
  }

  auto device_socket = proto::socket_for_device(socket, device);  // docs/client-protocol.md §2.1
  if (!device_socket) {
    std::fprintf(stderr, "ibdctl: %s\n", device_socket.error().str().c_str());
    return 1;
  }
  auto fd = connect_to(*device_socket);
  if (!fd) {
    std::fprintf(stderr, "ibdctl: %s\n", fd.error().str().c_str());
    return 1;
  }
  proto::HelloReq hello;
  if (auto r = call(fd->get(), proto::Op::kHello, 1, proto::encode(hello)); !r) {
    std::fprintf(stderr, "ibdctl: %s\n", r.error().str().c_str());
    return 1;
  }
  if (what == "paths")
    return paths_command(fd->get(), paths_sub, paths_gid, static_cast<uint8_t>(port), port_opt->count() > 0, as_json);
  if (what == "ipoib" && !ipoib_mode.empty()) return ipoib_mode_command(fd->get(), ipoib_mode);
  if (what == "ipoib") return ipoib_command(fd->get(), as_json);
  if (what == "cm") return cm_command(fd->get(), as_json);
  if (what == "cma") return cma_command(fd->get(), as_json);
  if (what == "path")
    return path_query(fd->get(), gid, static_cast<uint8_t>(port), static_cast<uint16_t>(pkey), fresh, as_json);
  proto::InfoReq info;
  info.flags = what == "objects" ? proto::kInfoObjects : 0;
  const auto info_body = proto::encode(info);
  int rc = 0;
  auto got = json_reply(fd->get(), proto::Op::kInfo, info_body, as_json, rc);
  if (!got) return rc;
  json& j = *got;
  if (what == "devices") {
    key_values(j["daemon"]);
    std::printf("\n");
    key_values(j["device"]);
    if (j.contains("devices") && j["devices"].size() > 1) {
      std::printf("\nall devices:\n");
      table(j["devices"], {"name", "socket"});
    }
  } else if (what == "ports") {
    table(j["ports"], {"port", "state_name", "phys_state", "lid", "sm_lid", "active_mtu", "port_guid",
                       "qkey_violations", "pkey_violations"});
  } else if (what == "clients") {
    table(j["clients"], {"id", "pid", "uid", "pds", "mrs", "cqs", "qps", "srqs", "ahs", "mems",
                         "requests", "errors", "events_dropped"});
  } else if (what == "objects") {
    json rows = json::array();
    for (const auto& c : j["clients"]) {
      if (!c.contains("objects")) continue;
      for (auto o : c["objects"]) {
        o["client"] = c["id"];
        json num = o.contains("qpn")    ? o["qpn"]
                   : o.contains("cqn")  ? o["cqn"]
                   : o.contains("srqn") ? o["srqn"]
                   : o.contains("pdn")  ? o["pdn"]
                   : o.contains("lkey") ? o["lkey"]
                   : o.contains("ahn")  ? o["ahn"]
                   : o.contains("iova") ? o["iova"]
                                        : json();
        o["number"] = num;
        rows.push_back(std::move(o));
      }
    }
    table(rows, {"client", "handle", "kind", "number", "type", "state", "length"});
  } else {
    key_values(j["counters"]);
  }
  if (j.value("truncated", false)) std::printf("(truncated: the reply exceeded one message)\n");
  return 0;
}
