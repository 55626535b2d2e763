// openib-devices: the devices ibd serves, as rdma-core's ibv_devices lists
// them (docs/library.md "Devices"): openib::list_devices(), then each one
// opened by name (ContextOptions::device) and queried.
//
//   openib-devices [--socket PATH] [-v]
//
// Prints "device  node GUID" per device; with -v also its ports' state,
// LID and link layer. Exit status 1 when ibd serves none there.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>

#include "openib/verbs.hpp"

namespace {

const char* state_name(uint8_t s) {
  static const char* names[] = {"NOP", "DOWN", "INIT", "ARMED", "ACTIVE"};
  return s < 5 ? names[s] : "?";
}

const char* link_layer_name(openib::LinkLayer l) {
  switch (l) {
    case openib::LinkLayer::kInfiniBand: return "InfiniBand";
    case openib::LinkLayer::kEthernet: return "Ethernet";
    case openib::LinkLayer::kUnspecified: break;
  }
  return "unspecified";
}

}  // namespace

int main(int argc, char** argv) {
  std::string socket;
  bool verbose = false;
  CLI::App app{"openib-devices: the devices ibd serves (like ibv_devices)"};
  app.add_option("--socket", socket, "ibd's socket (default $OPENIB_SOCKET, else /run/ibd/ibd.sock)");
  app.add_flag("-v,--verbose", verbose, "each device's ports too");
  CLI11_PARSE(app, argc, argv);
  auto list = openib::list_devices(socket);
  if (!list) {
    std::fprintf(stderr, "openib-devices: %s\n", list.error().str().c_str());
    return 1;
  }
  std::printf("    %-16s\t node GUID\n    %-16s\t----------------\n", "device", "------");
  int rc = 0;
  for (const auto& d : *list) {
    auto ctx = openib::Context::open(openib::ContextOptions{.socket = socket, .device = d.name});
    if (!ctx) {
      std::fprintf(stderr, "openib-devices: %s: %s\n", d.name.c_str(), ctx.error().str().c_str());
      rc = 1;
      continue;
    }
    auto attr = (*ctx)->query_device();
    if (!attr) {
      std::fprintf(stderr, "openib-devices: %s: %s\n", d.name.c_str(), attr.error().str().c_str());
      rc = 1;
      continue;
    }
    std::printf("    %-16s\t%016llx\n", attr->name.c_str(), static_cast<unsigned long long>(attr->node_guid));
    for (uint8_t p = 1; verbose && p <= attr->num_ports; ++p) {
      auto pa = (*ctx)->query_port(p);
      if (!pa) {
        std::printf("\tport %u: %s\n", p, pa.error().str().c_str());
        continue;
      }
      std::printf("\tport %u: %s, LID %u, %s\n", p, state_name(pa->state), pa->lid, link_layer_name(pa->link_layer));
    }
  }
  return rc;
}
