#include "ibd/service.hpp"

#include <algorithm>
#include <stdexcept>

namespace openib::ibd {

Result<void> expect_fds(const proto::Message& m, size_t n) {
  if (m.fds.size() != n)
    return err(EINVAL, "{} takes {} fds, got {}", proto::op_name(m.header.op), n, m.fds.size());
  return ok();
}

Result<void> Service::handle(const Caller&, proto::Message& m, Respond&) {
  return err(EOPNOTSUPP, "{} serves no operation {}", service_name(), m.header.op);
}

void ServiceRegistry::add(Service& s) {
  for (proto::Op op : s.ops()) {
    if (Service* other = serving(op))
      throw std::logic_error(std::string(proto::op_name(static_cast<uint16_t>(op))) + " is " +
                             std::string(other->service_name()) + "'s, not " + std::string(s.service_name()) + "'s");
    ops_.emplace_back(op, &s);
  }
  services_.push_back(&s);
}

Service* ServiceRegistry::serving(proto::Op op) const {
  auto it = std::find_if(ops_.begin(), ops_.end(), [op](const auto& p) { return p.first == op; });
  return it == ops_.end() ? nullptr : it->second;
}

void ServiceRegistry::client_gone(uint32_t client) const {
  for (auto it = services_.rbegin(); it != services_.rend(); ++it) (*it)->client_gone(client);
}

void ServiceRegistry::port_event(const hca::Event& e) const {
  for (Service* s : services_) s->port_event(e);
}

bool ServiceRegistry::on_cq_event(uint32_t cqn) const {
  return std::any_of(services_.begin(), services_.end(), [cqn](Service* s) { return s->on_cq_event(cqn); });
}

void ServiceRegistry::device_lost() const {
  for (auto it = services_.rbegin(); it != services_.rend(); ++it) (*it)->device_lost();
}

void ServiceRegistry::device_back() const {
  for (Service* s : services_) s->device_back();
}

std::vector<std::pair<std::string, uint64_t>> ServiceRegistry::counter_list() const {
  std::vector<std::pair<std::string, uint64_t>> out;
  for (Service* s : services_) {
    auto c = s->counter_list();
    out.insert(out.end(), c.begin(), c.end());
  }
  return out;
}

}  // namespace openib::ibd
