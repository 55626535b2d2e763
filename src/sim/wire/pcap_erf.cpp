#include "sim/wire/pcap_erf.hpp"

#include <algorithm>
#include <cerrno>

namespace openib::sim::wire {

namespace {

void le(std::vector<std::byte>& out, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<std::byte>((v >> (8 * i)) & 0xFF));
}
void be16(std::vector<std::byte>& out, std::uint32_t v) {
  out.push_back(static_cast<std::byte>((v >> 8) & 0xFF));
  out.push_back(static_cast<std::byte>(v & 0xFF));
}

constexpr std::uint8_t kErfFlagTrunc = 0x08;
constexpr std::size_t kMaxCaptured = kPcapSnaplen - kErfHeaderBytes;

}  // namespace

std::vector<std::byte> pcap_file_header() {
  // pcap-savefile(5): magic, version 2.4, thiszone, sigfigs, snaplen, linktype.
  std::vector<std::byte> h;
  le(h, kPcapMagic, 4);
  le(h, 2, 2);
  le(h, 4, 2);
  le(h, 0, 4);
  le(h, 0, 4);
  le(h, kPcapSnaplen, 4);
  le(h, kLinktypeErf, 4);
  return h;
}

std::vector<std::byte> pcap_erf_record(CaptureClock::time_point ts, std::uint8_t iface,
                                       std::span<const std::byte> packet) {
  auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(ts.time_since_epoch()).count();
  if (ns < 0) ns = 0;
  auto sec = static_cast<std::uint64_t>(ns / 1'000'000'000);
  auto frac_ns = static_cast<std::uint64_t>(ns % 1'000'000'000);
  std::size_t caplen = std::min(packet.size(), kMaxCaptured);
  std::size_t rlen = kErfHeaderBytes + caplen;

  std::vector<std::byte> r;
  r.reserve(kPcapRecordHeaderBytes + rlen);
  // pcap record header: ts_sec, ts_usec, incl_len, orig_len.
  le(r, sec, 4);
  le(r, frac_ns / 1000, 4);
  le(r, rlen, 4);
  le(r, kErfHeaderBytes + packet.size(), 4);
  // ERF record header (Endace ERF types reference, "Generic ERF header"):
  // timestamp, little-endian 32.32 fixed point seconds.
  le(r, (sec << 32) | ((frac_ns << 32) / 1'000'000'000), 8);
  r.push_back(static_cast<std::byte>(kErfTypeInfiniband));
  std::uint8_t flags = (iface & 0x3) | kErfFlagVlen | (caplen < packet.size() ? kErfFlagTrunc : 0);
  r.push_back(static_cast<std::byte>(flags));
  be16(r, static_cast<std::uint32_t>(rlen));                  // rlen: record length
  be16(r, 0);                                                 // lctr: loss counter
  be16(r, static_cast<std::uint32_t>(std::min<std::size_t>(packet.size(), 0xFFFF)));  // wlen
  r.insert(r.end(), packet.begin(), packet.begin() + static_cast<std::ptrdiff_t>(caplen));
  return r;
}

Result<std::unique_ptr<PcapErfWriter>> PcapErfWriter::open(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "wbe");
  if (!f) return sys_err("open capture {}", path);
  std::unique_ptr<PcapErfWriter> w(new PcapErfWriter(f, path));
  auto h = pcap_file_header();
  if (std::fwrite(h.data(), 1, h.size(), f) != h.size()) return sys_err("write {}", path);
  return w;
}

PcapErfWriter::~PcapErfWriter() {
  std::lock_guard lock(mu_);
  (void)close_locked();
}

Result<void> PcapErfWriter::write(std::span<const std::byte> packet, std::uint8_t iface,
                                  CaptureClock::time_point ts) {
  auto rec = pcap_erf_record(ts, iface, packet);  // built outside the lock
  std::lock_guard lock(mu_);
  if (!file_) return err(EBADF, "capture {} is closed", path_);
  if (std::fwrite(rec.data(), 1, rec.size(), file_) != rec.size())
    return sys_err("write capture {}", path_);
  ++records_;
  return ok();
}

Result<void> PcapErfWriter::flush() {
  std::lock_guard lock(mu_);
  if (file_ && std::fflush(file_) != 0) return sys_err("flush capture {}", path_);
  return ok();
}

Result<void> PcapErfWriter::close() {
  std::lock_guard lock(mu_);
  return close_locked();
}

Result<void> PcapErfWriter::close_locked() {
  if (!file_) return ok();
  int rc = std::fclose(file_);
  file_ = nullptr;
  if (rc != 0) return sys_err("close capture {}", path_);
  return ok();
}

std::uint64_t PcapErfWriter::records() const {
  std::lock_guard lock(mu_);
  return records_;
}

}  // namespace openib::sim::wire
