// Per-client and per-uid limits (quota.hpp; docs/operations.md "Limits").
#include "ibd/quota.hpp"

#include <CLI/CLI.hpp>
#include <string>
#include <tuple>

namespace openib::ibd {

namespace {
constexpr uint64_t kMiB = 1ull << 20;

// The flag suffix of each kind ("pds", ...); memory's count is "maps".
const char* flag_name(Kind k) {
  switch (k) {
    case Kind::kPd: return "pds";
    case Kind::kMem: return "maps";
    case Kind::kMr: return "mrs";
    case Kind::kCq: return "cqs";
    case Kind::kSrq: return "srqs";
    case Kind::kQp: return "qps";
    case Kind::kAh: return "ahs";
  }
  return "?";
}

constexpr Kind kKinds[] = {Kind::kPd, Kind::kMem, Kind::kMr, Kind::kCq, Kind::kSrq, Kind::kQp, Kind::kAh};

void set(Usage& u, Kind k, uint64_t n) { u.objects[static_cast<size_t>(k)] = n; }
}  // namespace

// Defaults (docs/operations.md "Limits"): a client gets a quarter of
// simhca's PDs (256) and SRQs, a uid half; QPs and CQs leave room for the
// benchmark's 100 QPs per process; 256 DMA maps of the vfio-user server's
// 1,024 per client.
Limits::Limits() {
  for (auto [k, c, u] : {std::tuple{Kind::kPd, 64, 128}, std::tuple{Kind::kMem, 256, 512},
                         std::tuple{Kind::kMr, 1024, 2048}, std::tuple{Kind::kCq, 4096, 8192},
                         std::tuple{Kind::kSrq, 64, 128}, std::tuple{Kind::kQp, 4096, 8192},
                         std::tuple{Kind::kAh, 1024, 2048}}) {
    set(per_client, k, c);
    set(per_uid, k, u);
  }
  per_client.map_bytes = 32ull << 30;
  per_uid.map_bytes = 64ull << 30;
  per_uid.connections = 256;
}

void add_limit_options(CLI::App& app, Limits& l) {
  for (Kind k : kKinds) {
    for (auto [scope, u] : {std::pair{"client", &l.per_client}, std::pair{"uid", &l.per_uid}}) {
      app.add_option(std::string("--") + scope + "-max-" + flag_name(k), u->objects[static_cast<size_t>(k)],
                     std::string("at most this many ") + kind_name(k) + (k == Kind::kMem ? " mappings" : "s") +
                         " per " + scope + " (EDQUOT past it)")
          ->capture_default_str();
    }
  }
  // MiB on the command line, bytes inside.
  // (No structured bindings: clang 15 cannot capture them.)
  for (const auto& p : {std::pair{"client", &l.per_client}, std::pair{"uid", &l.per_uid}}) {
    Usage* u = p.second;
    app.add_option_function<uint64_t>(
           std::string("--") + p.first + "-max-map-mib", [u](uint64_t mib) { u->map_bytes = mib * kMiB; },
           std::string("at most this many MiB mapped by MAP_MEM per ") + p.first + " (EDQUOT past it)")
        ->default_str(std::to_string(u->map_bytes / kMiB));
  }
  app.add_option("--uid-max-connections", l.per_uid.connections,
                 "at most this many connections per uid (uid 0 exempt); more are closed at once")
      ->capture_default_str();
  app.add_option("--hello-timeout-ms", l.hello_timeout_ms,
                 "a connection that has not said HELLO after this long is closed; 0: never")
      ->capture_default_str();
  app.add_option("--umad-max-outstanding", l.umad_max_outstanding,
                 "at most this many MAD requests awaiting a response per user-MAD agent")
      ->capture_default_str();
  for (auto [flag, what, b] : {std::tuple{"cm-ids", "CM ids (listeners, connections, SIDR requests)", &l.cm_ids},
                               std::tuple{"cma-ids", "RDMA CM ids", &l.cma_ids},
                               std::tuple{"mcast-joins", "multicast groups joined (MCAST_JOIN and RDMA CM joins)",
                                          &l.mcast_joins},
                               std::tuple{"services", "services registered (SERVICE_SET)", &l.services},
                               std::tuple{"event-bytes", "bytes of unread CM and RDMA CM events", &l.event_bytes}}) {
    app.add_option(std::string("--client-max-") + flag, b->per_client,
                   std::string("at most this many ") + what + " per client (EDQUOT past it)")
        ->capture_default_str();
    app.add_option(std::string("--uid-max-") + flag, b->per_uid,
                   std::string("at most this many ") + what + " per uid, uid 0 exempt (EDQUOT past it)")
        ->capture_default_str();
  }
  app.add_option("--uid-sa-queries-per-sec", l.uid_sa_queries_per_sec,
                 "fresh SA queries (path-cache misses) per second per uid, uid 0 exempt (EAGAIN past it; 0: no bound)")
      ->capture_default_str();
  app.add_option("--uid-sa-query-burst", l.uid_sa_query_burst,
                 "fresh SA queries a uid may make at once before --uid-sa-queries-per-sec applies")
      ->capture_default_str();
}

Result<void> Quota::admit(uid_t uid) {
  if (uid == 0) return ok();
  Usage& u = uids_[uid];
  if (u.connections >= limits_.per_uid.connections)
    return err(EDQUOT, "uid {} has {} connections, the limit", uid, u.connections);
  ++u.connections;
  return ok();
}

void Quota::release_connection(uid_t uid) {
  if (uid == 0) return;
  auto it = uids_.find(uid);
  if (it != uids_.end() && it->second.connections) --it->second.connections;
}

Result<void> Quota::check(uint32_t client, uid_t uid, Kind k, uint64_t bytes) const {
  const size_t i = static_cast<size_t>(k);
  auto over = [&](const Usage* u, const Usage& lim, const char* scope) -> Result<void> {
    if (!u) return ok();
    if (u->objects[i] >= lim.objects[i])
      return err(EDQUOT, "the {} limit of {} {}{} per {} is reached", scope, lim.objects[i], kind_name(k),
                 k == Kind::kMem ? " mappings" : "s", scope);
    if (bytes && bytes > lim.map_bytes - std::min(lim.map_bytes, u->map_bytes))
      return err(EDQUOT, "{} more bytes would pass the {} limit of {} MiB mapped per {}", bytes, scope,
                 lim.map_bytes / kMiB, scope);
    return ok();
  };
  static const Usage kNone{};
  auto c = clients_.find(client);
  OPENIB_TRY(over(c == clients_.end() ? &kNone : &c->second, limits_.per_client, "client"));
  if (uid == 0) return ok();
  auto u = uids_.find(uid);
  return over(u == uids_.end() ? &kNone : &u->second, limits_.per_uid, "uid");
}

void Quota::added(uint32_t client, uid_t uid, Kind k, uint64_t bytes) {
  for (Usage* u : {&clients_[client], &uids_[uid]}) {
    ++u->objects[static_cast<size_t>(k)];
    u->map_bytes += bytes;
  }
}

void Quota::removed(uint32_t client, uid_t uid, Kind k, uint64_t bytes) {
  for (auto* u : {&clients_[client], &uids_[uid]}) {
    auto& n = u->objects[static_cast<size_t>(k)];
    if (n) --n;
    u->map_bytes -= std::min(u->map_bytes, bytes);
  }
}

Result<void> Quota::check_request(uint32_t client, uid_t uid, const proto::Message& m) const {
  using proto::Op;
  switch (static_cast<Op>(m.header.op)) {
    case Op::kAllocPd: return check(client, uid, Kind::kPd);
    case Op::kRegMr: return check(client, uid, Kind::kMr);
    case Op::kCreateCq: return check(client, uid, Kind::kCq);
    case Op::kCreateSrq: return check(client, uid, Kind::kSrq);
    case Op::kCreateQp: return check(client, uid, Kind::kQp);
    case Op::kCreateAh: return check(client, uid, Kind::kAh);
    case Op::kMapMem: {
      auto req = proto::decode<proto::MapMemReq>(m.body);
      return check(client, uid, Kind::kMem, req ? req->length : 0);  // a bad body: the handler says so
    }
    case Op::kMapMemRange:
    case Op::kMapMemShared: {
      auto req = proto::decode<proto::MapMemRangeReq>(m.body);
      return check(client, uid, Kind::kMem, req ? req->length : 0);
    }
    default: return ok();
  }
}

void Quota::forget(uint32_t client, uid_t uid) {
  auto c = clients_.find(client);
  if (c == clients_.end()) return;
  if (auto u = uids_.find(uid); u != uids_.end()) {
    for (size_t i = 0; i < kNumKinds; ++i) u->second.objects[i] -= std::min(u->second.objects[i], c->second.objects[i]);
    u->second.map_bytes -= std::min(u->second.map_bytes, c->second.map_bytes);
  }
  clients_.erase(c);
}

const Usage* Quota::uid_usage(uid_t uid) const {
  auto it = uids_.find(uid);
  return it == uids_.end() ? nullptr : &it->second;
}

void HelloDeadlines::arm(uint32_t id) {
  if (timeout_ms_ == 0) return;
  auto t = std::make_unique<boost::asio::steady_timer>(io_);
  t->expires_after(std::chrono::milliseconds(timeout_ms_));
  t->async_wait([this, id](const boost::system::error_code& e) {
    if (e) return;  // cancelled: said HELLO, left, or the server is gone
    timers_.erase(id);
    expired_(id);
  });
  timers_[id] = std::move(t);
}

}  // namespace openib::ibd
