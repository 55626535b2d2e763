#include "sim/wire/pcap_erf.hpp"

#include <algorithm>
#include <cerrno>

#include "common/byte_order.hpp"

namespace openib::sim::wire {

namespace {

constexpr std::uint8_t kErfFlagTrunc = 0x08;
constexpr std::size_t kMaxCaptured = kPcapSnaplen - kErfHeaderBytes;

}  // namespace

std::vector<std::byte> pcap_file_header(std::uint32_t linktype) {
  // pcap-savefile(5): magic, version 2.4, thiszone, sigfigs, snaplen, linktype.
  // Written little-endian; readers tell the order by the magic.
  std::vector<std::byte> h(kPcapFileHeaderBytes);
  bytes::put_le(h, 0, 4, kPcapMagic);
  bytes::put_le(h, 4, 2, 2);
  bytes::put_le(h, 6, 2, 4);
  bytes::put_le(h, 8, 4, 0);
  bytes::put_le(h, 12, 4, 0);
  bytes::put_le(h, 16, 4, kPcapSnaplen);
  bytes::put_le(h, 20, 4, linktype);
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

  std::vector<std::byte> r(kPcapRecordHeaderBytes + rlen);
  // pcap record header, little-endian as the file header: ts_sec, ts_usec,
  // incl_len, orig_len.
  bytes::put_le(r, 0, 4, sec);
  bytes::put_le(r, 4, 4, frac_ns / 1000);
  bytes::put_le(r, 8, 4, rlen);
  bytes::put_le(r, 12, 4, kErfHeaderBytes + packet.size());
  // ERF record header (Endace ERF types reference, "Generic ERF header"):
  // timestamp, little-endian 32.32 fixed point seconds; the rest big-endian.
  const std::size_t erf = kPcapRecordHeaderBytes;
  bytes::put_le(r, erf + 0, 8, (sec << 32) | ((frac_ns << 32) / 1'000'000'000));
  bytes::put8(r, erf + 8, kErfTypeInfiniband);
  const std::uint8_t flags = (iface & 0x3) | kErfFlagVlen | (caplen < packet.size() ? kErfFlagTrunc : 0);
  bytes::put8(r, erf + 9, flags);
  bytes::put16(r, erf + 10, rlen);                                          // rlen: record length
  bytes::put16(r, erf + 12, 0);                                             // lctr: loss counter
  bytes::put16(r, erf + 14, std::min<std::size_t>(packet.size(), 0xFFFF));  // wlen, saturated
  std::copy_n(packet.begin(), caplen, r.begin() + static_cast<std::ptrdiff_t>(erf + kErfHeaderBytes));
  return r;
}

namespace {

// pcap-savefile(5): the record header, little-endian as the file header:
// ts_sec, ts_usec, incl_len, orig_len.
void put_record_header(std::span<std::byte> r, CaptureClock::time_point ts, std::size_t incl_len,
                       std::size_t orig_len) {
  auto us = std::chrono::duration_cast<std::chrono::microseconds>(ts.time_since_epoch()).count();
  if (us < 0) us = 0;
  bytes::put_le(r, 0, 4, static_cast<std::uint64_t>(us / 1'000'000));
  bytes::put_le(r, 4, 4, static_cast<std::uint64_t>(us % 1'000'000));
  bytes::put_le(r, 8, 4, incl_len);
  bytes::put_le(r, 12, 4, orig_len);
}

}  // namespace

std::vector<std::byte> pcap_eth_record(CaptureClock::time_point ts, std::span<const std::byte> frame) {
  const std::size_t caplen = std::min<std::size_t>(frame.size(), kPcapSnaplen);
  std::vector<std::byte> r(kPcapRecordHeaderBytes + caplen);
  put_record_header(r, ts, caplen, frame.size());
  std::copy_n(frame.begin(), caplen, r.begin() + kPcapRecordHeaderBytes);
  return r;
}

Result<std::FILE*> PcapFile::create(const std::string& path, std::uint32_t linktype) {
  std::FILE* f = std::fopen(path.c_str(), "wbe");
  if (!f) return sys_err("open capture {}", path);
  auto h = pcap_file_header(linktype);
  if (std::fwrite(h.data(), 1, h.size(), f) != h.size()) {
    auto e = sys_err("write {}", path);
    std::fclose(f);
    return e;
  }
  return f;
}

PcapFile::~PcapFile() {
  std::lock_guard lock(mu_);
  (void)close_locked();
}

Result<void> PcapFile::append(std::span<const std::byte> rec) {
  std::lock_guard lock(mu_);
  if (!file_) return err(EBADF, "capture {} is closed", path_);
  if (std::fwrite(rec.data(), 1, rec.size(), file_) != rec.size())
    return sys_err("write capture {}", path_);
  ++records_;
  return ok();
}

Result<void> PcapFile::flush() {
  std::lock_guard lock(mu_);
  if (file_ && std::fflush(file_) != 0) return sys_err("flush capture {}", path_);
  return ok();
}

Result<void> PcapFile::close() {
  std::lock_guard lock(mu_);
  return close_locked();
}

Result<void> PcapFile::close_locked() {
  if (!file_) return ok();
  int rc = std::fclose(file_);
  file_ = nullptr;
  if (rc != 0) return sys_err("close capture {}", path_);
  return ok();
}

std::uint64_t PcapFile::records() const {
  std::lock_guard lock(mu_);
  return records_;
}

Result<std::unique_ptr<PcapErfWriter>> PcapErfWriter::open(const std::string& path) {
  OPENIB_TRY_ASSIGN(std::FILE * f, create(path, kLinktypeErf));
  return std::unique_ptr<PcapErfWriter>(new PcapErfWriter(f, path));
}

Result<void> PcapErfWriter::write(std::span<const std::byte> packet, std::uint8_t iface,
                                  CaptureClock::time_point ts) {
  return append(pcap_erf_record(ts, iface, packet));  // built outside the lock
}

Result<std::unique_ptr<PcapEthWriter>> PcapEthWriter::open(const std::string& path) {
  OPENIB_TRY_ASSIGN(std::FILE * f, create(path, kLinktypeEthernet));
  return std::unique_ptr<PcapEthWriter>(new PcapEthWriter(f, path));
}

Result<void> PcapEthWriter::write(std::span<const std::byte> frame, CaptureClock::time_point ts) {
  return append(pcap_eth_record(ts, frame));
}

}  // namespace openib::sim::wire
