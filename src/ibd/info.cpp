// INFO (docs/client-protocol.md "INFO"): the daemon, device, ports and
// clients as JSON text, for ibdctl. Bounded by the message size: past it,
// objects and then clients are left out and "truncated" is set.
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "ibd/fd_closer.hpp"
#include "ibd/server.hpp"

#ifndef OPENIB_VERSION
#define OPENIB_VERSION "unknown"
#endif

namespace openib::ibd {

using nlohmann::json;

namespace {
const char* qp_type_name(uint8_t t) {
  switch (t) {
    case 0: return "RC";
    case 1: return "UC";
    case 2: return "UD";
  }
  return "?";
}
const char* qp_state_name(uint8_t s) {
  static const char* names[] = {"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"};
  return s < 7 ? names[s] : "?";
}

const char* port_state_name(uint8_t s) {
  static const char* names[] = {"NOP", "DOWN", "INIT", "ARMED", "ACTIVE"};
  return s < 5 ? names[s] : "?";
}

json client_objects(const Client& c) {
  json objs = json::array();
  for (const auto& [h, o] : c.objects) {
    json j{{"handle", h}, {"kind", kind_name(o.kind)}};
    switch (o.kind) {
      case Kind::kPd: j["pdn"] = o.number; break;
      case Kind::kMem: j["iova"] = o.map.iova(); j["length"] = o.length; break;
      case Kind::kMr: j["lkey"] = o.number; j["length"] = o.length; j["pd"] = o.deps[0]; j["mem"] = o.deps[1]; break;
      case Kind::kCq: j["cqn"] = o.number; j["log_size"] = o.log_size; j["eventfd"] = o.eventfd.valid(); break;
      case Kind::kSrq: j["srqn"] = o.number; j["log_size"] = o.log_size; break;
      case Kind::kQp:
        j["qpn"] = o.number;
        j["type"] = qp_type_name(o.qp_type);
        j["state"] = qp_state_name(o.qp_state);  // as last set or queried
        j["pd"] = o.deps[0];
        j["send_cq"] = o.deps[1];
        j["recv_cq"] = o.deps[2];
        if (o.deps[3]) j["srq"] = o.deps[3];
        break;
      case Kind::kAh: j["ahn"] = o.number; j["pd"] = o.deps[0]; break;
    }
    objs.push_back(std::move(j));
  }
  return objs;
}
json client_summary(uint32_t id, const Client& c, std::chrono::steady_clock::time_point now) {
  return json{{"id", id}, {"pid", c.pid}, {"uid", c.uid}, {"gid", c.gid}, {"uar", c.uar},
              {"pds", c.counts[size_t(Kind::kPd)]}, {"mrs", c.counts[size_t(Kind::kMr)]},
              {"cqs", c.counts[size_t(Kind::kCq)]}, {"qps", c.counts[size_t(Kind::kQp)]},
              {"srqs", c.counts[size_t(Kind::kSrq)]}, {"ahs", c.counts[size_t(Kind::kAh)]},
              {"mems", c.counts[size_t(Kind::kMem)]},
              {"requests", c.stats.requests}, {"errors", c.stats.errors},
              {"events_queued", c.events.size()}, {"events_dropped", c.stats.events_dropped},
              {"uptime_s", std::chrono::duration_cast<std::chrono::seconds>(now - c.connected).count()}};
}
json ports_json(const std::vector<std::optional<hca::PortAttr>>& got) {
  json ports = json::array();
  for (size_t i = 0; i < got.size(); ++i) {
    const auto& a = got[i];
    if (!a) continue;
    const auto p = static_cast<uint8_t>(i + 1);
    ports.push_back({{"port", p}, {"state", a->state}, {"state_name", port_state_name(a->state)}, {"phys_state", a->phys_state},
                     {"lid", a->lid}, {"sm_lid", a->sm_lid}, {"lmc", a->lmc},
                     {"active_mtu", a->active_mtu}, {"active_width", a->active_width},
                     {"active_speed", a->active_speed},
                     {"link_layer", a->link_layer == hca::LinkLayer::kEthernet ? "Ethernet" : "InfiniBand"},
                     {"port_guid", fmt::format("{:#018x}", a->port_guid)},
                     {"qkey_violations", a->qkey_violations},
                     {"pkey_violations", a->pkey_violations}});
  }
  return ports;
}
}  // namespace

std::string Server::info_json(const Client& asker, uint32_t flags,
                              const std::vector<std::optional<hca::PortAttr>>& got) {
  const auto now = std::chrono::steady_clock::now();
  json j;
  j["daemon"] = {{"pid", ::getpid()},
                 {"version", OPENIB_VERSION},
                 {"protocol", proto::kProtocolMax},
                 {"uptime_s", std::chrono::duration_cast<std::chrono::seconds>(now - started_).count()},
                 {"socket", opts_.socket},
                 {"device", opts_.device_name},
                 {"device_state", device_state_name(device_state_)},
                 {"device_generation", generation_},
                 {"device_losses", counters_.device_losses}};
  const hca::DeviceCaps& k = hca_.caps();
  j["devices"] = json::array();
  for (const auto& [name, socket] : opts_.all_devices) j["devices"].push_back({{"name", name}, {"socket", socket}});
  j["device"] = {{"name", opts_.name},
                 {"spec", opts_.device_name},
                 {"driver", hca_.info().driver},
                 {"provider", hca_.info().provider},
                 {"alive", hca_.alive()},
                 {"fw_rev", fmt::format("{}.{}", hca_.info().fw_rev >> 16, hca_.info().fw_rev & 0xffff)},
                 {"node_guid", fmt::format("{:#018x}", k.node_guid)},
                 {"max_qp", k.max_qp}, {"max_cq", k.max_cq}, {"max_srq", k.max_srq},
                 {"max_pd", k.max_pd}, {"max_mr", k.max_mkey}, {"max_ah", k.max_ah},
                 {"max_uar", k.max_uar}, {"log_max_qp_wr", k.log_max_qp_wr},
                 {"log_max_cqe", k.log_max_cqe}, {"max_mkey_pages", k.max_mkey_pages},
                 {"num_ports", k.num_ports}, {"interrupts", hca_.interrupts_seen()}};
  // docs/simhca.md §3.1: what the device holds now. One BAR0 read, a
  // round trip to simhca: INFO only, never a data path. Left out while the
  // device is lost or the read fails.
  if (hca_.is_open() && hca_.alive())
    if (auto o = hca_.device_objects())
      j["device"]["device_objects"] = {{"pds", o->pds}, {"mrs", o->mkeys}, {"cqs", o->cqs},
                                       {"qps", o->qps}, {"srqs", o->srqs}, {"ahs", o->ahs},
                                       {"eqs", o->eqs}, {"uars", o->uars}, {"dma_maps", o->dma_maps}};
  j["ports"] = ports_json(got);
  j["counters"] = info_counters();
  return info_with_clients(std::move(j), asker, flags, now);
}

json Server::info_counters() const {
  const auto pool = hca_.is_open() ? hca_.pool().stats() : dma::PoolStats{};  // closed while the device is dead
  json c = {{"connects", counters_.connects},
                   {"disconnects", counters_.disconnects},
                   {"requests", counters_.requests},
                   {"errors", counters_.errors},
                   {"protocol_violations", counters_.protocol_violations},
                   {"events", counters_.events},
                   {"events_dropped", counters_.events_dropped},
                   {"cq_notifications", counters_.cq_notifications},
                   {"quarantined_mappings", counters_.quarantined_mappings},
                   {"connections_refused_uid_limit", counters_.connections_refused_uid_limit},
                   {"hello_timeouts", counters_.hello_timeouts},
                   {"dma_mapped_bytes", pool.mapped_bytes},
                   {"dma_maps_total", pool.maps_total},
                   {"dma_unmaps_total", pool.unmaps_total}};
  c["connections_refused_peercred"] = counters_.connections_refused_peercred;
  c["fds_closed_off_loop_total"] = fds_closed_off_loop();
  // Gauges of what clients that left still hold: 0 once ibd is done with them.
  c["departing_clients"] = departing_.size();
  c["fds_closing"] = fds_closing_off_loop();
  if (services_)
    for (const auto& [name, value] : services_->counter_list()) c[name] = value;
  return c;
}

// The clients, each dumped alone and assembled into `j`'s text.
std::string Server::info_with_clients(json j, const Client& asker, uint32_t flags,
                                      std::chrono::steady_clock::time_point now) const {
  // kInfoObjects: every client's objects for root, the asker's own otherwise.
  const bool all_objects = (flags & proto::kInfoObjects) && asker.uid == 0;
  const bool own_objects = (flags & proto::kInfoObjects) != 0;
  // Room for the header and the reply status.
  const size_t limit = proto::kMaxMessage - proto::kHeaderSize - 4;
  // Each client is dumped alone, once, and the text is assembled from the
  // pieces: leaving out objects (from the last clients first) and then
  // clients (from the end) is arithmetic on their sizes, linear in the
  // number of clients, never a dump of everything per entry left out.
  j["clients"] = json::array();
  j["truncated"] = false;
  std::string head = j.dump();
  std::vector<std::string> pieces;
  pieces.reserve(clients_.size());
  size_t total = head.size();
  for (const auto& [id, c] : clients_) {
    pieces.push_back(client_summary(id, *c, now).dump());
    total += pieces.back().size() + (pieces.size() > 1 ? 1 : 0);
  }
  bool truncated = false;
  if (total > limit) {  // clients from the end, without objects
    truncated = true;
    while (!pieces.empty() && total > limit) {
      total -= pieces.back().size() + (pieces.size() > 1 ? 1 : 0);
      pieces.pop_back();
    }
  } else if (own_objects) {  // objects for the clients in order, while they fit
    size_t i = 0;
    for (const auto& [id, c] : clients_) {
      std::string& piece = pieces[i++];
      if (!all_objects && id != asker.id) continue;
      json cj = client_summary(id, *c, now);
      cj["objects"] = client_objects(*c);
      std::string full = cj.dump();
      if (total - piece.size() + full.size() > limit) {
        truncated = true;
        break;
      }
      total += full.size() - piece.size();
      piece = std::move(full);
    }
  }
  if (truncated) {
    j["truncated"] = true;
    head = j.dump();
  }
  static constexpr std::string_view kClients = "\"clients\":[]";
  const size_t at = head.find(kClients) + kClients.size() - 1;  // before the ']'
  std::string text;
  text.reserve(total);
  text.append(head, 0, at);
  for (size_t i = 0; i < pieces.size(); ++i) {
    if (i) text += ',';
    text += pieces[i];
  }
  text.append(head, at);
  return text;
}

}  // namespace openib::ibd
