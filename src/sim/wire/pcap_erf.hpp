// Packet capture of IBA packets in the format Mellanox's ibdump writes and
// tshark 4.0 decodes: a classic pcap file (magic 0xa1b2c3d4, LINKTYPE_ERF
// 197) whose records are each an ERF record of type 21 (ERF_TYPE_INFINIBAND)
// holding one packet from the LRH through the VCRC. docs/wire.md "Capture"
// describes the bytes. (LINKTYPE_INFINIBAND 247 is not decoded by tshark 4.0.)
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "common/result.hpp"

namespace openib::sim::wire {

inline constexpr std::uint32_t kPcapMagic = 0xa1b2c3d4;  // microsecond timestamps
inline constexpr std::uint32_t kLinktypeErf = 197;
inline constexpr std::uint32_t kPcapSnaplen = 65535;
inline constexpr std::uint8_t kErfTypeInfiniband = 21;
inline constexpr std::uint8_t kErfFlagVlen = 0x04;  // varying record length
inline constexpr std::size_t kPcapFileHeaderBytes = 24;
inline constexpr std::size_t kPcapRecordHeaderBytes = 16;
inline constexpr std::size_t kErfHeaderBytes = 16;

using CaptureClock = std::chrono::system_clock;

// The 24-byte pcap file header (little-endian, as written by x86 libpcap).
std::vector<std::byte> pcap_file_header();

// One pcap record: 16-byte pcap header, 16-byte ERF header, the packet.
// `iface` (0-3) goes into the ERF flags' interface bits; simhca/ibfabric use
// it to tag the port or direction. Packets longer than the snaplen less the
// ERF header are truncated and flagged so.
std::vector<std::byte> pcap_erf_record(CaptureClock::time_point ts, std::uint8_t iface,
                                       std::span<const std::byte> packet);

// A capture file. write() may be called from any thread; records are
// appended whole, in call order. close() (or the destructor) flushes.
class PcapErfWriter {
 public:
  static Result<std::unique_ptr<PcapErfWriter>> open(const std::string& path);
  ~PcapErfWriter();
  PcapErfWriter(const PcapErfWriter&) = delete;
  PcapErfWriter& operator=(const PcapErfWriter&) = delete;

  Result<void> write(std::span<const std::byte> packet, std::uint8_t iface,
                     CaptureClock::time_point ts = CaptureClock::now());
  Result<void> flush();
  Result<void> close();
  std::uint64_t records() const;

 private:
  PcapErfWriter(std::FILE* f, std::string path) : file_(f), path_(std::move(path)) {}
  Result<void> close_locked();

  mutable std::mutex mu_;
  std::FILE* file_;  // null once closed
  std::string path_;
  std::uint64_t records_ = 0;
};

}  // namespace openib::sim::wire
