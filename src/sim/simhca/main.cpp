// simhca: the emulated HCA as a vfio-user server (docs/simhca.md §13).
//
//   simhca --socket PATH [--log LEVEL] [--guid HEX] [--cmd-delay-ms N]
//
// One client at a time; the device is reset between clients. Commands run
// after the doorbell write is answered (§5.3), from this loop.
#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstdio>
#include <string>

#include "common/log.hpp"
#include "sim/simhca/vfio_model.hpp"

namespace {

volatile std::sig_atomic_t g_stop = 0;
void on_signal(int) { g_stop = 1; }

int usage(const char* prog) {
  std::fprintf(stderr, "usage: %s --socket PATH [--log LEVEL] [--guid HEX] [--cmd-delay-ms N]\n",
               prog);
  return 2;
}

bool parse_u64(const char* s, int base, uint64_t& out) {
  char* end = nullptr;
  errno = 0;
  out = std::strtoull(s, &end, base);
  return errno == 0 && end != s && *end == '\0';
}

}  // namespace

int main(int argc, char** argv) {
  using namespace openib;
  using namespace openib::simhca;
  std::string path;
  HcaOptions opts;
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--socket" && has_value) {
      path = argv[++i];
    } else if (a == "--log" && has_value) {
      log::set_level(argv[++i]);
    } else if (a == "--guid" && has_value) {
      if (!parse_u64(argv[++i], 16, opts.caps.node_guid)) return usage(argv[0]);
    } else if (a == "--cmd-delay-ms" && has_value) {
      uint64_t ms = 0;
      if (!parse_u64(argv[++i], 10, ms) || ms > 60000) return usage(argv[0]);
      opts.cmd_delay = std::chrono::milliseconds(ms);
    } else {
      return usage(argv[0]);
    }
  }
  if (path.empty()) return usage(argv[0]);
  auto log = log::get("simhca");

  struct sigaction sa{};
  sa.sa_handler = on_signal;
  ::sigaction(SIGTERM, &sa, nullptr);
  ::sigaction(SIGINT, &sa, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  auto model = VfioModel::create(opts);
  if (!model) {
    log->error("{}", model.error().str());
    return 1;
  }
  vfio::user::VfioUserServer server(**model);
  if (auto r = server.listen(path); !r) {
    log->error("{}", r.error().str());
    return 1;
  }
  log->info("simhca {:04x}:{:04x} listening on {}", kVendorId, kDeviceId, path);
  Hca& hca = (*model)->hca();
  while (!g_stop) {
    if (!server.connected()) {
      auto a = server.accept_client(200);
      if (!a && a.error().code != ETIMEDOUT) {
        log->error("{}", a.error().str());
        return 1;
      }
      continue;
    }
    // Wait for a message no longer than the next command is due (§13
    // --cmd-delay-ms), so slow commands never stall register accesses.
    int timeout = 200;
    if (auto due = hca.next_due()) {
      auto left = std::chrono::ceil<std::chrono::milliseconds>(*due - Hca::Clock::now()).count();
      timeout = static_cast<int>(std::clamp<decltype(left)>(left, 0, 200));
    }
    auto r = server.handle_message(timeout);
    if (!r) {
      log->error("{}", r.error().str());
      return 1;
    }
    if (!*r) {
      log->info("simhca: client gone; device reset");
      (*model)->reset();
      continue;
    }
    hca.run_due(Hca::Clock::now());
  }
  const HcaStats& s = hca.stats();
  const auto& ss = server.stats();
  log->info(
      "simhca: exiting; commands {} (failed {}, dropped {}), bad accesses {}, events {} "
      "(dropped {}), irqs {}, vfio-user messages {} (malformed {}), dma faults {}",
      s.cmds_completed, s.cmds_failed, s.cmds_dropped, s.bad_access, s.events_written,
      s.events_dropped, s.irqs_signalled, ss.messages, ss.bad_messages, ss.dma_faults);
  return 0;
}
