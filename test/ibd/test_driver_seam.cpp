// The device seam (src/hca/device.hpp, docs/device-access.md "Device
// drivers"): ibd built with a driver of the test's own in its table
// (ibd_counting.cpp: CountingDevice around simhca's driver, for simhca's
// PCI ID). Clients' RC traffic, the user-MAD service's QP0/QP1, the port
// events and a device recovery all pass through it; INFO names it.
// OPENIB_IBD is that ibd (test/ibd/meson.build).
#include <signal.h>
#include <sys/wait.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "harness.hpp"
#include "rc_link.hpp"

using namespace openib::testing;
using namespace std::chrono_literals;

namespace {

// The counts of the log's "counting driver:" line (CountingDevice's end).
std::map<std::string, long> counts_in(const std::string& log) {
  std::ifstream in(log);
  std::string line, last;
  while (std::getline(in, line))
    if (line.rfind("counting driver:", 0) == 0) last = line;
  std::map<std::string, long> out;
  std::istringstream words(last.substr(last.find(':') + 1));
  for (std::string w; words >> w;) {
    auto eq = w.rfind('=');
    if (eq != std::string::npos) out[w.substr(0, eq)] = std::stol(w.substr(eq + 1));
  }
  return out;
}

}  // namespace

TEST_CASE("ibd with a driver of the test's own serves clients through the device seam alone", "[driver-seam]") {
  TempDir dir;
  IbdOptions o;
  o.log = "info";
  auto ibd = std::make_unique<Ibd>(dir.path(), "seam", o);
  auto info = ibdctl(ibd->socket(), "devices");
  REQUIRE(info.exited_ok());
  CHECK(info.out.find("\"driver\":\"counting(simhca)\"") != std::string::npos);
  CHECK(info.out.find("\"provider\":\"simhca\"") != std::string::npos);

  rc_pingpong(ibd->socket());
  // A device lost and brought up again, through the seam's life cycle.
  const pid_t sim = ibd->simhca_pid();
  REQUIRE(sim > 0);
  REQUIRE(::kill(sim, SIGKILL) == 0);
  REQUIRE(wait_until([&] { return ibdctl(ibd->socket(), "devices").out.find("\"device_generation\":2") != std::string::npos; }, 30s));
  rc_pingpong(ibd->socket());

  const std::string log = ibd->log_path();
  auto st = ibd->stop();
  REQUIRE(st.has_value());
  CHECK(WIFEXITED(*st));
  CHECK(WEXITSTATUS(*st) == 0);
  auto n = counts_in(log);
  INFO("counts: " << [&] {
    std::string s;
    for (auto& [k, v] : n) s += k + "=" + std::to_string(v) + " ";
    return s;
  }());
  REQUIRE_FALSE(n.empty());
  // Clients' objects (two ping-pongs: each 2 QPs, their CQs, MRs, PDs, UARs).
  CHECK(n["alloc_uar"] >= 4);
  CHECK(n["alloc_pd"] >= 4);
  CHECK(n["create_mkey"] >= 4);
  CHECK(n["create_cq_at"] >= 4);
  CHECK(n["create_qp_at"] >= 4);
  CHECK(n["modify_qp"] >= 12);
  CHECK(n["destroy"] >= 16);
  CHECK(n["uar_page_fd"] >= 4);
  // ibd's own QP0/QP1 (the user-MAD service) in both generations.
  CHECK(n["create_cq"] >= 2);
  CHECK(n["create_qp"] >= 4);
  CHECK(n["post_recv"] > 0);
  CHECK(n["arm_cq"] > 0);
  // The static port setup, the health check, the recovery.
  CHECK(n["set_port"] >= 2);
  CHECK(n["reopen_async"] == 1);
  CHECK(n["close_dead"] >= 1);
  CHECK(n["close"] >= 1);
  CHECK(n["event.port_state_change"] >= 1);
}
