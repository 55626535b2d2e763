// pcap/ERF capture of IBA packets (src/sim/wire/pcap_erf): the record bytes,
// concurrent appends, and tshark decoding a capture of one packet of each
// common kind as InfiniBand with the right OpCodes and nothing malformed.
// tshark is a test prerequisite (scripts/setup.sh installs it): without it
// the tshark test fails rather than skips.
#include <catch2/catch.hpp>

#include "tshark.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "sim/wire/packet.hpp"
#include "sim/wire/pcap_erf.hpp"

using namespace openib::sim::wire;
namespace fs = std::filesystem;

namespace {

std::vector<std::byte> payload(std::size_t n, std::uint8_t seed) {
  std::vector<std::byte> p(n);
  for (std::size_t i = 0; i < n; ++i) p[i] = static_cast<std::byte>((seed + i * 7) & 0xFF);
  return p;
}

std::uint32_t le32(const std::vector<std::byte>& b, std::size_t off) {
  std::uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | std::to_integer<std::uint32_t>(b[off + i]);
  return v;
}
std::uint32_t be16(const std::vector<std::byte>& b, std::size_t off) {
  return (std::to_integer<std::uint32_t>(b[off]) << 8) | std::to_integer<std::uint32_t>(b[off + 1]);
}

std::vector<std::byte> read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::vector<char> c((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<std::byte> out(c.size());
  for (std::size_t i = 0; i < c.size(); ++i) out[i] = static_cast<std::byte>(c[i]);
  return out;
}

// Splits a pcap written by PcapErfWriter into the IBA packets it holds.
std::vector<std::vector<std::byte>> read_records(const std::vector<std::byte>& file) {
  std::vector<std::vector<std::byte>> pkts;
  std::size_t off = kPcapFileHeaderBytes;
  while (off + kPcapRecordHeaderBytes + kErfHeaderBytes <= file.size()) {
    std::uint32_t incl = le32(file, off + 8);
    std::size_t erf = off + kPcapRecordHeaderBytes;
    std::size_t wlen = be16(file, erf + 14);
    REQUIRE(erf + incl <= file.size());
    pkts.emplace_back(file.begin() + static_cast<std::ptrdiff_t>(erf + kErfHeaderBytes),
                      file.begin() + static_cast<std::ptrdiff_t>(erf + kErfHeaderBytes + wlen));
    off = erf + incl;
  }
  CHECK(off == file.size());
  return pkts;
}

fs::path temp_path(const std::string& name) {
  return fs::temp_directory_path() / (name + "." + std::to_string(::getpid()) + ".pcap");
}

struct Captured {
  std::vector<std::byte> bytes;
  std::string opcode;  // as tshark prints infiniband.bth.opcode
  bool has_payload;
};

Headers rc(Op op, std::uint32_t psn) {
  Headers h;
  h.lrh.sl = 0;
  h.lrh.dlid = 0x0002;
  h.lrh.slid = 0x0001;
  h.bth.opcode = opcode(Transport::kRc, op);
  h.bth.pkey = 0xFFFF;
  h.bth.dest_qp = 0x000123;
  h.bth.psn = psn;
  return h;
}

std::vector<std::byte> must(openib::Result<std::vector<std::byte>> r) {
  if (!r) FAIL(r.error().str());
  return std::move(r).value();
}

// One packet of each kind the brief of simhca needs to show in a capture.
std::vector<Captured> sample_packets() {
  std::vector<Captured> v;
  auto add = [&](Headers h, std::vector<std::byte> pl) {
    v.push_back({must(build_packet(h, pl)), std::to_string(h.bth.opcode), !pl.empty()});
  };
  add(rc(Op::kSendOnly, 1), payload(13, 1));
  Headers wf = rc(Op::kWriteFirst, 2);
  wf.reth = Reth{0x7F0000001000, 0x1234, 3 * 256};
  add(wf, payload(256, 2));
  add(rc(Op::kWriteMiddle, 3), payload(256, 3));
  add(rc(Op::kWriteLast, 4), payload(256, 4));
  Headers rr = rc(Op::kReadRequest, 5);
  rr.reth = Reth{0x7F0000002000, 0x5678, 64};
  add(rr, {});
  Headers resp = rc(Op::kReadResponseOnly, 5);
  resp.aeth = Aeth::ack(1, kAethInvalidCredits);
  add(resp, payload(64, 5));
  Headers ack = rc(Op::kAcknowledge, 4);
  ack.aeth = Aeth::ack(2, 4);
  add(ack, {});
  Headers nak = rc(Op::kAcknowledge, 6);
  nak.aeth = Aeth::nak(2, NakCode::kPsnSequenceError);
  add(nak, {});
  Headers rnr = rc(Op::kAcknowledge, 6);
  rnr.aeth = Aeth::rnr_nak(2, 0x0E);
  add(rnr, {});
  Headers cas = rc(Op::kCompareSwap, 7);
  cas.atomic_eth = AtomicEth{0x7F0000003000, 0x9ABC, 2, 1};
  add(cas, {});
  Headers aack = rc(Op::kAtomicAcknowledge, 7);
  aack.aeth = Aeth::ack(3, 4);
  aack.atomic_ack_eth = AtomicAckEth{1};
  add(aack, {});
  Headers ud;
  ud.lrh.sl = 0;
  ud.lrh.dlid = 0x0003;
  ud.lrh.slid = 0x0001;
  ud.grh = Grh{};
  ud.grh->hop_lmt = 64;
  ud.grh->sgid = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x00, 0x02, 0xc9, 0x03, 0, 0, 0, 1};
  ud.grh->dgid = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x00, 0x02, 0xc9, 0x03, 0, 0, 0, 3};
  ud.bth.opcode = opcode(Transport::kUd, Op::kSendOnly);
  ud.bth.pkey = 0xFFFF;
  ud.bth.dest_qp = 0x000042;
  ud.bth.psn = 9;
  ud.deth = Deth{0x11111111, 0x000077};
  add(ud, payload(30, 9));
  return v;
}

std::vector<std::string> lines(const std::string& s) {
  std::vector<std::string> v;
  std::istringstream in(s);
  for (std::string l; std::getline(in, l);) v.push_back(l);
  return v;
}

}  // namespace

TEST_CASE("pcap file header and ERF record bytes", "[wire][pcap]") {
  auto fh = pcap_file_header();
  REQUIRE(fh.size() == kPcapFileHeaderBytes);
  CHECK(fh == std::vector<std::byte>{std::byte{0xd4}, std::byte{0xc3}, std::byte{0xb2}, std::byte{0xa1},
                                     std::byte{2},    std::byte{0},    std::byte{4},    std::byte{0},
                                     std::byte{0},    std::byte{0},    std::byte{0},    std::byte{0},
                                     std::byte{0},    std::byte{0},    std::byte{0},    std::byte{0},
                                     std::byte{0xff}, std::byte{0xff}, std::byte{0},    std::byte{0},
                                     std::byte{197},  std::byte{0},    std::byte{0},    std::byte{0}});

  // 1000.5 s after the epoch, interface 2, a 6-byte "packet".
  auto ts = CaptureClock::time_point(std::chrono::milliseconds(1'000'500));
  std::vector<std::byte> pkt(6, std::byte{0xAB});
  auto r = pcap_erf_record(ts, 2, pkt);
  REQUIRE(r.size() == 16 + 16 + 6);
  CHECK(le32(r, 0) == 1000);     // ts_sec
  CHECK(le32(r, 4) == 500000);   // ts_usec
  CHECK(le32(r, 8) == 22);       // incl_len = ERF header + packet
  CHECK(le32(r, 12) == 22);      // orig_len
  CHECK(le32(r, 16) == 0x80000000u);  // ERF timestamp: fraction .5
  CHECK(le32(r, 20) == 1000);         // ... seconds
  CHECK(r[24] == std::byte{21});      // ERF_TYPE_INFINIBAND
  CHECK(r[25] == std::byte{0x06});    // vlen | interface 2
  CHECK(be16(r, 26) == 22);           // rlen
  CHECK(be16(r, 28) == 0);            // lctr
  CHECK(be16(r, 30) == 6);            // wlen
  CHECK(std::vector<std::byte>(r.begin() + 32, r.end()) == pkt);
  CHECK(pcap_erf_record(ts, 7, pkt)[25] == std::byte{0x07});  // interface masked to 2 bits
}

TEST_CASE("PcapErfWriter appends whole records from many threads", "[wire][pcap]") {
  auto path = temp_path("openib_pcap_threads");
  auto samples = sample_packets();
  {
    auto w = PcapErfWriter::open(path.string());
    REQUIRE(w.ok());
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t)
      threads.emplace_back([&, t] {
        for (int i = 0; i < 50; ++i) {
          const auto& s = samples[static_cast<std::size_t>(i + t) % samples.size()];
          REQUIRE((*w)->write(s.bytes, static_cast<std::uint8_t>(t)).ok());
        }
      });
    for (auto& th : threads) th.join();
    CHECK((*w)->records() == 200);
    REQUIRE((*w)->close().ok());
    auto again = (*w)->write(samples[0].bytes, 0);
    REQUIRE_FALSE(again.ok());
    CHECK(again.error().code == EBADF);
  }
  auto pkts = read_records(read_file(path));
  CHECK(pkts.size() == 200);
  for (const auto& p : pkts) CHECK(parse_packet(p).ok());
  fs::remove(path);
}

TEST_CASE("PcapErfWriter reports an unwritable path", "[wire][pcap]") {
  auto w = PcapErfWriter::open("/nonexistent-dir/x.pcap");
  REQUIRE_FALSE(w.ok());
  CHECK(w.error().code == ENOENT);
}

TEST_CASE("tshark decodes the capture as InfiniBand", "[wire][pcap][tshark]") {
  int status = 0;
  openib::test::run_command("command -v tshark >/dev/null", status);
  if (status != 0) FAIL("tshark not found: it is a test prerequisite, installed by scripts/setup.sh");

  auto path = temp_path("openib_pcap_tshark");
  auto samples = sample_packets();
  {
    auto w = PcapErfWriter::open(path.string());
    REQUIRE(w.ok());
    for (std::size_t i = 0; i < samples.size(); ++i)
      REQUIRE((*w)->write(samples[i].bytes, static_cast<std::uint8_t>(i % 2)).ok());
  }  // destructor flushes and closes

  // Payload heuristics (RPC-over-RDMA, SMB Direct, ...) would read our
  // arbitrary payloads as their protocols; switch them off.
  const std::string tshark =
      openib::test::tshark_read(path.string());

  SECTION("each frame is ERF/InfiniBand with our OpCode and our CRC bytes") {
    auto out = openib::test::run_command(tshark +
                       " -T fields -E separator=, -e frame.protocols -e infiniband.bth.opcode"
                       " -e infiniband.invariant.crc -e infiniband.variant.crc -e _ws.malformed",
                   status);
    INFO(out);
    REQUIRE(status == 0);
    auto ls = lines(out);
    REQUIRE(ls.size() == samples.size());
    for (std::size_t i = 0; i < samples.size(); ++i) {
      const auto& b = samples[i].bytes;
      // tshark prints the CRC fields as big-endian numbers of the bytes at
      // the end of the packet; it found them only if it parsed every
      // header and the payload to the right length.
      char crcs[32];
      std::snprintf(crcs, sizeof crcs, "0x%02x%02x%02x%02x,0x%02x%02x",
                    std::to_integer<unsigned>(b[b.size() - 6]), std::to_integer<unsigned>(b[b.size() - 5]),
                    std::to_integer<unsigned>(b[b.size() - 4]), std::to_integer<unsigned>(b[b.size() - 3]),
                    std::to_integer<unsigned>(b[b.size() - 2]), std::to_integer<unsigned>(b[b.size() - 1]));
      // Payload shows as plain "data": no heuristic claimed it.
      std::string expect = std::string(samples[i].has_payload ? "erf:infiniband:data," : "erf:infiniband,") +
                           samples[i].opcode + "," + crcs + ",";
      INFO("frame " << i + 1);
      CHECK(ls[i].rfind(expect, 0) == 0);
      CHECK(ls[i] == expect);  // nothing after: no payload protocol, no _ws.malformed
    }
  }

  SECTION("the expert info summary is empty") {
    auto out = openib::test::run_command(tshark + " -q -z expert", status);
    INFO(out);
    REQUIRE(status == 0);
    for (const char* sev : {"Errors (", "Warns (", "Notes ("}) CHECK(out.find(sev) == std::string::npos);
  }

  SECTION("no malformed packets and no warnings in the expert info") {
    auto out = openib::test::run_command(tshark + " -V", status);
    INFO(out.substr(0, 4000));
    REQUIRE(status == 0);
    CHECK(out.find("Malformed") == std::string::npos);
    CHECK(out.find("Expert Info") == std::string::npos);
    CHECK(out.find("Unknown") == std::string::npos);
    // The decode shows the operations by name.
    for (const char* want : {"Reliable Connection (RC) - SEND Only", "RDMA WRITE First",
                             "RDMA WRITE Middle", "RDMA WRITE Last", "RDMA READ Request",
                             "RDMA READ response Only", "Acknowledge", "CmpSwap",
                             "ATOMIC Acknowledge", "Unreliable Datagram (UD) - SEND only",
                             "Global Route Header", "DETH - Datagram Extended Transport Header"}) {
      INFO(want);
      CHECK(out.find(want) != std::string::npos);
    }
  }
  // OPENIB_KEEP_PCAP=1 keeps the capture for a look with wireshark.
  if (std::getenv("OPENIB_KEEP_PCAP"))
    WARN("capture kept at " << path.string());
  else
    fs::remove(path);
}

TEST_CASE("tshark flags a packet cut short (the checks above can fail)", "[wire][pcap][tshark]") {
  int status = 0;
  openib::test::run_command("command -v tshark >/dev/null", status);
  if (status != 0) FAIL("tshark not found: it is a test prerequisite, installed by scripts/setup.sh");

  // A READ Request whose RETH lost 8 bytes: LRH.PktLen adjusted, so only a
  // dissector that knows the OpCode's headers can tell.
  Headers rr = rc(Op::kReadRequest, 5);
  rr.reth = Reth{0x7F0000002000, 0x5678, 64};
  auto pkt = must(build_packet(rr, {}));
  pkt.erase(pkt.begin() + 8 + 12 + 8, pkt.begin() + 8 + 12 + 16);
  pkt[5] = static_cast<std::byte>(std::to_integer<unsigned>(pkt[5]) - 2);
  REQUIRE_FALSE(parse_packet(pkt).ok());

  auto path = temp_path("openib_pcap_bad");
  {
    auto w = PcapErfWriter::open(path.string());
    REQUIRE(w.ok());
    REQUIRE((*w)->write(pkt, 0).ok());
  }
  auto out = openib::test::run_command("tshark -n -r " + path.string() + " -T fields -e frame.protocols -e _ws.malformed", status);
  INFO(out);
  REQUIRE(status == 0);
  CHECK(out.find("erf:infiniband") != std::string::npos);
  CHECK(out.find("Malformed") != std::string::npos);
  fs::remove(path);
}
