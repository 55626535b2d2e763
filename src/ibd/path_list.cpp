// PATH_LIST and PATH_FLUSH (docs/client-protocol.md "Path records"): the
// path cache as an operator sees it, `ibdctl paths`, and dropping entries
// by hand, `ibdctl paths flush` (sa_service.hpp).
#include <arpa/inet.h>

#include <algorithm>
#include <tuple>
#include <nlohmann/json.hpp>

#include "ibd/sa_service.hpp"

namespace openib::ibd {

using nlohmann::json;

namespace {
std::string gid_text(const sa::Gid& g) {
  char b[INET6_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET6, g.data(), b, sizeof b);
  return b;
}

// One entry as PATH_LIST shows it: what was asked (port, DGID, P_Key, the
// ComponentMask) and what the SA answered (the record's DLID, SL, MTU as
// bytes, rate as IBA 15.2.5.16's code), or "negative" for "no path".
json entry_json(const sa::CachedPath& p) {
  const sa::PathRecord& q = p.key.query();
  json j = {{"port", p.key.port()},
            {"dgid", gid_text(q.dgid)},
            {"pkey", fmt::format("{:#06x}", q.pkey)},
            {"comp_mask", fmt::format("{:#x}", p.key.comp_mask())},
            {"state", p.negative ? "negative" : p.stale ? "stale" : "fresh"},
            {"age_ms", p.age.count()}};
  if (p.negative) return j;
  const sa::PathRecord& r = p.record;
  j.update({{"sgid", gid_text(r.sgid)},
            {"dlid", r.dlid},
            {"slid", r.slid},
            {"sl", r.sl},
            {"mtu", r.mtu >= 1 && r.mtu <= 5 ? 128 << r.mtu : 0},
            {"rate", r.rate},
            {"packet_life_time", r.packet_life_time}});
  return j;
}

bool listed_before(const sa::CachedPath& a, const sa::CachedPath& b) {
  const sa::PathRecord &qa = a.key.query(), &qb = b.key.query();
  return std::make_tuple(a.key.port(), qa.dgid, qa.pkey, a.key.comp_mask(), qa.sl, qa.tclass) <
         std::make_tuple(b.key.port(), qb.dgid, qb.pkey, b.key.comp_mask(), qb.sl, qb.tclass);
}
}  // namespace

// One page of at most `max_bytes` of JSON: {"total", "start", "next" (null
// on the last page), "paths": [...]}. The order is sorted, so pages asked
// one after the other cover the cache as it was, give or take the entries
// that came or went in between.
std::string SaService::list_json(uint8_t port, uint32_t start, size_t max_bytes) const {
  std::vector<sa::CachedPath> all = cache_.snapshot(/*with_negative*/ true);
  std::erase_if(all, [port](const sa::CachedPath& p) { return port != 0 && p.key.port() != port; });
  std::sort(all.begin(), all.end(), listed_before);
  const size_t total = all.size();
  const std::string head = fmt::format(R"({{"total":{},"start":{},"paths":[)", total, start);
  std::string body;
  size_t i = start;
  for (; i < total; ++i) {
    std::string e = entry_json(all[i]).dump();
    // Room for the separator, the closing and a "next" of 10 digits.
    if (i > start && head.size() + body.size() + e.size() + 32 > max_bytes) break;
    if (i > start) body.push_back(',');
    body += e;
  }
  const std::string next = i < total ? std::to_string(i) : "null";
  return head + body + R"(],"next":)" + next + "}";
}

size_t SaService::flush(uint8_t port, const std::optional<sa::Gid>& dgid) {
  return cache_.flush(port, dgid);
}

}  // namespace openib::ibd
