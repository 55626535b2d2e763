// openib-path: a path lookup through libopenib's PathResolver
// (include/openib/path.hpp; docs/library.md "Path resolution"), the way an
// application asks "how do I reach this GID": the shared table first (no
// system call, no message), else ibd.
//
//   openib-path GID [--port N] [--pkey P] [--fresh] [--async] [--count N]
//               [--watch SECONDS]
//
// Looks GID up `--count` times (default 1) and prints, for each, where the
// answer came from (table, ibd's cache, the SA) and the record's DLID,
// SLID, SL, MTU, rate and packet lifetime; then the resolver's counters.
// `--async` uses resolve_async() and waits on fd() with poll(2).
// `--watch` then waits (at most SECONDS) for ibd's PATH_CHANGED event for
// GID (Context::async_fd(), AsyncEventType::kPathChanged: ibd revalidated
// the path to another record), prints it and looks GID up again; exit
// status 2 if none came.
// Exit status 1 with ibd's error (e.g. "no path") when there is none.
#include <arpa/inet.h>
#include <poll.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <string>

#include "common.hpp"
#include "openib/path.hpp"

namespace {

const char* source_name(openib::PathSource s) {
  switch (s) {
    case openib::PathSource::kTable: return "table";
    case openib::PathSource::kIbdCache: return "ibd-cache";
    case openib::PathSource::kSa: return "sa";
    case openib::PathSource::kNone: break;
  }
  return "none";
}

void print(const char* source, const openib::PathRecord& p) {
  std::printf("source %s dlid %u slid %u sl %u mtu %u rate %u packet_life_time %u%s\n", source, p.dlid,
              p.slid, p.sl, 128u << p.mtu, p.rate, p.packet_life_time, p.stale ? " stale" : "");
}

}  // namespace

int main(int argc, char** argv) {
  using namespace openib;
  using examples::check;
  using examples::die;
  CLI::App app{"openib-path: a path lookup through libopenib's PathResolver"};
  std::string gid;
  PathQuery q;
  bool async = false;
  unsigned count = 1;
  int watch_s = 0;
  app.add_option("gid", gid, "destination GID (IPv6 notation)")->required();
  app.add_option("--port", q.port, "local port")->capture_default_str();
  app.add_option("--pkey", q.pkey, "P_Key (0: the port's at index 0)")->capture_default_str();
  app.add_flag("--fresh", q.fresh, "ask the SA, around the table and ibd's cache");
  app.add_flag("--async", async, "resolve_async() and poll(2) on fd()");
  app.add_option("--count", count, "lookups")->check(CLI::Range(1u, 1000000u))->capture_default_str();
  app.add_option("--watch", watch_s, "then wait this long for a PATH_CHANGED event for GID")
      ->check(CLI::Range(0, 3600));
  CLI11_PARSE(app, argc, argv);
  if (::inet_pton(AF_INET6, gid.c_str(), q.dgid.raw.data()) != 1) die("not a GID: " + gid);

  auto ctx = check(Context::open(), "open");
  auto paths = check(PathResolver::open(*ctx), "PathResolver::open");
  for (unsigned i = 0; i < count; ++i) {
    const auto before = paths->counters();
    if (!async) {
      auto p = paths->resolve(q);
      if (!p) die("resolve: " + p.error().str());
      const auto after = paths->counters();
      // Where it came from: a table hit moves table_hits; else ibd answered.
      print(after.table_hits > before.table_hits ? "table" : "ibd", *p);
      continue;
    }
    check(paths->resolve_async(q, i), "resolve_async");
    std::vector<PathCompletion> done;
    while (done.empty()) {
      pollfd pfd{paths->fd(), POLLIN, 0};
      if (::poll(&pfd, 1, 30000) <= 0) die("no completion within 30 s");
      done = paths->poll();
    }
    for (auto& c : done) {
      if (!c.path) die("resolve_async: " + c.path.error().str());
      print(source_name(c.source), *c.path);
    }
  }
  std::fflush(stdout);
  if (watch_s > 0) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(watch_s);
    for (bool changed = false; !changed;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) {
        std::printf("no path change within %d s\n", watch_s);
        return 2;
      }
      pollfd pfd{ctx->async_fd(), POLLIN, 0};
      if (::poll(&pfd, 1, static_cast<int>(left.count())) <= 0) continue;
      for (const auto& e : check(ctx->get_async_events(), "get_async_events")) {
        if (e.type != AsyncEventType::kPathChanged || e.dgid.raw != q.dgid.raw) continue;
        std::printf("path-changed port %u pkey %#x dgid %s\n", e.port, e.pkey, gid.c_str());
        changed = true;
      }
    }
    auto p = paths->resolve(q);
    if (!p) die("resolve after the change: " + p.error().str());
    print("after-change", *p);
  }
  const auto c = paths->counters();
  std::printf("table %s, hits %llu, misses %llu, busy %llu, socket queries %llu\n",
              paths->has_table() ? "mapped" : "none", static_cast<unsigned long long>(c.table_hits),
              static_cast<unsigned long long>(c.table_misses), static_cast<unsigned long long>(c.table_busy),
              static_cast<unsigned long long>(c.socket_queries));
  return 0;
}
