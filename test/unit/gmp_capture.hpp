// A capture file of MADs for tshark: each MAD as a GMP to QP1 (IBA 13.5.1:
// UD Send Only, DETH with the GSI Q_Key) in a pcap file of IBA packets
// (src/sim/wire), removed when the GmpCapture goes. For the tests that
// check how tshark reads a codec's bytes.
#pragma once

#include <catch2/catch.hpp>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>
#include <unistd.h>

#include "mad/bytes.hpp"
#include "sim/wire/packet.hpp"
#include "sim/wire/pcap_erf.hpp"
#include "tshark.hpp"

namespace openib::test {

class GmpCapture {
 public:
  // A file in the temporary directory named after `name` and the pid; the
  // test fails if tshark is not installed.
  explicit GmpCapture(const std::string& name)
      : path_(std::filesystem::temp_directory_path() / (name + "." + std::to_string(::getpid()) + ".pcap")) {
    int status = 0;
    run_command("command -v tshark >/dev/null", status);
    if (status != 0) FAIL("tshark not found: it is a test prerequisite, installed by scripts/setup.sh");
  }
  ~GmpCapture() { std::filesystem::remove(path_); }
  GmpCapture(const GmpCapture&) = delete;
  GmpCapture& operator=(const GmpCapture&) = delete;

  // Writes the file: one packet per MAD, PSNs 0, 1, ...
  void write(const std::vector<mad::ByteVec>& mads) const {
    using namespace openib::sim::wire;
    auto w = PcapErfWriter::open(path_.string());
    REQUIRE(w.ok());
    for (std::size_t i = 0; i < mads.size(); ++i) {
      Headers h;
      h.lrh.dlid = 2;
      h.lrh.slid = 1;
      h.bth.opcode = opcode(Transport::kUd, Op::kSendOnly);
      h.bth.pkey = 0xFFFF;
      h.bth.dest_qp = 1;
      h.bth.psn = static_cast<std::uint32_t>(i);
      h.deth = Deth{0x80010000, 1};
      auto pkt = build_packet(h, mads[i]);
      REQUIRE(pkt.ok());
      REQUIRE((*w)->write(*pkt, 0).ok());
    }
    REQUIRE((*w)->close().ok());
  }

  // `tshark -n -r FILE` with the heuristics off (tshark.hpp).
  std::string tshark() const { return tshark_read(path_.string()); }

 private:
  std::filesystem::path path_;
};

}  // namespace openib::test
