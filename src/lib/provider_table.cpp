// The table of providers (provider.hpp): the built-in ones, and those a
// test registers. Read at Context::open only, under a mutex; the data path
// never looks here.
#include <cerrno>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include "clientproto/messages.hpp"
#include "common/log.hpp"
#include "lib/arena.hpp"
#include "lib/provider.hpp"

namespace openib::lib {

namespace {

struct Table {
  std::mutex mu;
  std::vector<const Provider*> entries{&kSimhcaProvider};
};
Table& table() {
  static Table t;
  return t;
}

// A name from the wire or the environment, fit for a log line.
std::string printable(std::string_view s) {
  std::string out;
  for (char ch : s) out += (ch >= 0x20 && ch < 0x7f) ? ch : '?';
  return out;
}

const Provider* find_locked(Table& t, std::string_view name) {
  for (const Provider* p : t.entries)
    if (name == p->name) return p;
  return nullptr;
}

}  // namespace

const Provider* find_provider(std::string_view name) {
  Table& t = table();
  std::lock_guard lock(t.mu);
  return find_locked(t, name);
}

Result<void> register_provider(const Provider& p) {
  const std::string_view name = p.name ? p.name : "";
  if (name.empty() || name.size() > proto::kProviderNameSize)
    return err(EINVAL, "provider name '{}': 1 to {} bytes", printable(name), proto::kProviderNameSize);
  if (!p.log_sq_stride || !p.log_rq_stride || !p.sq_caps || !p.rq_max_sge || !p.encode_send || !p.encode_recv ||
      !p.ring_sq || !p.update_rq || !p.update_srq || !p.reset_qp || !p.poll_cqe || !p.update_cq || !p.arm_cq)
    return err(EINVAL, "provider '{}': an operation is missing", name);
  if (p.cqe_size == 0 || p.uar_page_size == 0 || p.dbr_size == 0 || p.dbr_size > Arena::kAlign)
    return err(EINVAL, "provider '{}': CQE size {}, UAR page {}, doorbell record {} (at most {})", name, p.cqe_size,
               p.uar_page_size, p.dbr_size, Arena::kAlign);
  Table& t = table();
  std::lock_guard lock(t.mu);
  for (const Provider*& e : t.entries) {
    if (name == e->name) {
      e = &p;
      return ok();
    }
  }
  t.entries.push_back(&p);
  return ok();
}

Result<const Provider*> choose_provider(std::string_view reported) {
  std::string_view name = reported;
  const char* env = std::getenv("OPENIB_PROVIDER");
  if (env && *env) {
    name = env;
    log::get("openib")->info("OPENIB_PROVIDER: provider '{}' instead of '{}', which ibd named", printable(name),
                             printable(reported));
  }
  if (const Provider* p = find_provider(name)) return p;
  return err(EPROTONOSUPPORT, "no libopenib provider '{}'{} for this device", printable(name),
             name == reported ? " (named by ibd at HELLO)" : " (named by OPENIB_PROVIDER)");
}

}  // namespace openib::lib
