// ibd's shared path table (path_table_shm.hpp).
#include "ibd/path_table_shm.hpp"

namespace openib::ibd {

sa::PathKey default_path_key(uint8_t port, const sa::Gid& sgid, uint16_t pkey, const sa::Gid& dgid) {
  sa::PathRecord q;
  q.dgid = dgid;
  q.sgid = sgid;
  q.pkey = pkey;
  q.numb_path = 1;
  q.reversible = true;
  return sa::PathKey(port, kDefaultPathMask, q);
}

std::optional<sa::PathTableKey> table_key(const sa::PathKey& key) {
  const sa::PathRecord& q = key.query();
  if (key.comp_mask() != kDefaultPathMask || q.numb_path != 1 || !q.reversible || q.pkey == 0 || key.port() == 0 ||
      key.port() >= sa::kPathTableMaxPorts)
    return std::nullopt;
  return sa::PathTableKey{key.port(), q.pkey, q.dgid};
}

Result<std::unique_ptr<PathTableShm>> PathTableShm::create(uint32_t slots) {
  if (slots < 64 || (slots & (slots - 1)))
    return err(EINVAL, "path table of {} slots: a power of two >= 64 is needed", slots);
  OPENIB_TRY_ASSIGN(auto mem, SealedMemfd::create("ibd-path-table", sa::path_table_bytes(slots)));
  OPENIB_TRY_ASSIGN(auto w, sa::PathTableWriter::format(mem.mem(), slots));
  return std::unique_ptr<PathTableShm>(new PathTableShm(std::move(mem), w));
}

void PathTableShm::on_entry(const sa::PathKey& key, const sa::PathRecord* record, bool stale) {
  const auto k = table_key(key);
  if (!k) return;
  if (!record) {
    if (writer_.erase(*k)) ++counters_.withdrawn;
    return;
  }
  sa::PathTableEntry e;
  sa::encode_path_record(std::as_writable_bytes(std::span(e.record)), *record);
  e.stale = stale;
  if (writer_.put(*k, e)) {
    ++counters_.published;
  } else {
    ++counters_.full;
    // An older record of this key may still be there: never leave it.
    if (writer_.erase(*k)) ++counters_.withdrawn;
  }
}

}  // namespace openib::ibd
