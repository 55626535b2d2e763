#include "hca/device.hpp"

#include "common/log.hpp"

namespace openib::hca {

void Device::modify_qp_chain_async(uint32_t qpn, std::vector<QpChange> steps, Done<void> done) {
  if (steps.empty()) return done(ok());
  const QpChange first = steps.front();
  steps.erase(steps.begin());
  // On success the device is alive (the completion came from it); on an
  // error `this` is not touched.
  modify_qp_async(qpn, first.mask, first.attr,
                  [this, qpn, steps = std::move(steps), done = std::move(done)](Result<void> r) mutable {
                    if (!r || steps.empty()) return done(std::move(r));
                    modify_qp_chain_async(qpn, std::move(steps), std::move(done));
                  });
}

const char* event_name(Event::Kind k) {
  using K = Event::Kind;
  switch (k) {
    case K::kCqCompletion: return "CQ completion";
    case K::kCqError: return "CQ error";
    case K::kQpFatal: return "QP fatal";
    case K::kQpReqErr: return "QP request error";
    case K::kQpAccessErr: return "QP access error";
    case K::kQpLastWqeReached: return "QP last WQE reached";
    case K::kQpCommEst: return "communication established";
    case K::kSqDrained: return "SQ drained";
    case K::kSrqLimit: return "SRQ limit reached";
    case K::kSrqError: return "SRQ error";
    case K::kPortState: return "port state change";
    case K::kLidChange: return "LID change";
    case K::kSmChange: return "SM change";
    case K::kClientReregister: return "client reregister";
    case K::kPkeyChange: return "P_Key change";
    case K::kGidChange: return "GID change";
    case K::kDeviceFatal: return "device fatal";
  }
  return "?";
}

namespace {
const char* kind_name(ObjectKind k) {
  switch (k) {
    case ObjectKind::kPd: return "PD";
    case ObjectKind::kUar: return "UAR";
    case ObjectKind::kMkey: return "MKEY";
    case ObjectKind::kCq: return "CQ";
    case ObjectKind::kSrq: return "SRQ";
    case ObjectKind::kQp: return "QP";
    case ObjectKind::kAh: return "AH";
  }
  return "?";
}

void destroy_next(Device& dev, std::vector<std::pair<ObjectKind, uint32_t>> steps, size_t i,
                  std::shared_ptr<void> keep, std::function<void()> done) {
  if (i == steps.size() || !dev.is_open() || !dev.alive()) return done();
  const auto [kind, num] = steps[i];
  dev.destroy_async(kind, num, [&dev, s = std::move(steps), i, keep = std::move(keep), d = std::move(done), kind = kind,
                                num = num](Result<void> r) mutable {
    if (!r && r.error().code == ENODEV) return d();  // the rest went with the device
    if (!r) log::get("hca")->warn("{}: destroying {} {:#x}: {}", dev.name(), kind_name(kind), num, r.error().str());
    destroy_next(dev, std::move(s), i + 1, std::move(keep), std::move(d));
  });
}
}  // namespace

void destroy_in_order(Device& dev, std::vector<std::pair<ObjectKind, uint32_t>> steps, std::shared_ptr<void> keep,
                      std::function<void()> done) {
  destroy_next(dev, std::move(steps), 0, std::move(keep), std::move(done));
}

}  // namespace openib::hca
