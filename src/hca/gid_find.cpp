#include "hca/gid_find.hpp"

#include <cerrno>
#include <memory>

namespace openib::hca {

namespace {
struct Walk {
  Device& hca;
  uint8_t port;
  std::array<uint8_t, 16> gid;
  uint16_t len = 0;
  Device::Done<uint16_t> done;
};

void next(std::shared_ptr<Walk> w, uint16_t index) {
  if (index >= w->len) {
    Device::Done<uint16_t> d = std::move(w->done);
    return d(err(ENOENT, "no entry of port {}'s GID table ({} entries) holds that GID", w->port, w->len));
  }
  Device& h = w->hca;
  const uint8_t port = w->port;
  h.query_gid_async(port, index, [w = std::move(w), index](Result<GidEntry> e) mutable {
    if (e && e->gid == w->gid) {
      Device::Done<uint16_t> d = std::move(w->done);
      return d(index);
    }
    if (!e && e.error().code != ENODATA) {  // not an empty entry: the device refused
      Device::Done<uint16_t> d = std::move(w->done);
      return d(e.take_error());
    }
    next(std::move(w), static_cast<uint16_t>(index + 1));
  });
}
}  // namespace

void find_gid_async(Device& hca, uint8_t port, const std::array<uint8_t, 16>& gid, Device::Done<uint16_t> done) {
  auto w = std::make_shared<Walk>(Walk{hca, port, gid, 0, std::move(done)});
  hca.query_port_async(port, [w](Result<PortAttr> a) mutable {
    if (!a) {
      Device::Done<uint16_t> d = std::move(w->done);
      return d(a.take_error());
    }
    w->len = a->gid_table_len;
    next(std::move(w), 0);
  });
}

}  // namespace openib::hca
