// Packet capture of IBA packets in the format Mellanox's ibdump writes and
// tshark 4.0 decodes: a classic pcap file (magic 0xa1b2c3d4, LINKTYPE_ERF
// 197) whose records are each an ERF record of type 21 (ERF_TYPE_INFINIBAND)
// holding one packet from the LRH through the VCRC. docs/wire.md "Capture"
// describes the bytes. (LINKTYPE_INFINIBAND 247 is not decoded by tshark 4.0.)
// RoCEv2 ports capture Ethernet frames instead: a pcap file of
// LINKTYPE_ETHERNET (1) whose records are the frames as sent, without FCS
// (PcapEthWriter; docs/wire.md "Capture format").
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
inline constexpr std::uint32_t kLinktypeEthernet = 1;  // IEEE 802.3, no FCS
inline constexpr std::uint32_t kPcapSnaplen = 65535;
inline constexpr std::uint8_t kErfTypeInfiniband = 21;
inline constexpr std::uint8_t kErfFlagVlen = 0x04;  // varying record length
inline constexpr std::size_t kPcapFileHeaderBytes = 24;
inline constexpr std::size_t kPcapRecordHeaderBytes = 16;
inline constexpr std::size_t kErfHeaderBytes = 16;

using CaptureClock = std::chrono::system_clock;

// The 24-byte pcap file header (little-endian, as written by x86 libpcap).
std::vector<std::byte> pcap_file_header(std::uint32_t linktype = kLinktypeErf);

// One pcap record: 16-byte pcap header, 16-byte ERF header, the packet.
// `iface` (0-3) goes into the ERF flags' interface bits; simhca/ibfabric use
// it to tag the port or direction. Packets longer than the snaplen less the
// ERF header are truncated and flagged so.
std::vector<std::byte> pcap_erf_record(CaptureClock::time_point ts, std::uint8_t iface,
                                       std::span<const std::byte> packet);

// One pcap record of LINKTYPE_ETHERNET: the 16-byte pcap header, then the
// frame (truncated to the snaplen, orig_len telling its length).
std::vector<std::byte> pcap_eth_record(CaptureClock::time_point ts, std::span<const std::byte> frame);

// A capture file of one link type, what the writers below share: the file
// header at open, then records appended whole, in call order, from any
// thread. close() (or the destructor) flushes.
class PcapFile {
 public:
  PcapFile(const PcapFile&) = delete;
  PcapFile& operator=(const PcapFile&) = delete;

  Result<void> flush();
  Result<void> close();
  std::uint64_t records() const;

 protected:
  ~PcapFile();  // a writer is owned as itself
  // Creates `path` and writes the file header.
  static Result<std::FILE*> create(const std::string& path, std::uint32_t linktype);
  PcapFile(std::FILE* f, std::string path) : file_(f), path_(std::move(path)) {}
  Result<void> append(std::span<const std::byte> record);

 private:
  Result<void> close_locked();

  mutable std::mutex mu_;
  std::FILE* file_;  // null once closed
  std::string path_;
  std::uint64_t records_ = 0;
};

// IBA packets as ERF records (LINKTYPE_ERF).
class PcapErfWriter : public PcapFile {
 public:
  static Result<std::unique_ptr<PcapErfWriter>> open(const std::string& path);
  Result<void> write(std::span<const std::byte> packet, std::uint8_t iface,
                     CaptureClock::time_point ts = CaptureClock::now());

 private:
  using PcapFile::PcapFile;
};

// Ethernet frames (LINKTYPE_ETHERNET), e.g. RoCEv2 (roce.hpp).
class PcapEthWriter : public PcapFile {
 public:
  static Result<std::unique_ptr<PcapEthWriter>> open(const std::string& path);
  Result<void> write(std::span<const std::byte> frame, CaptureClock::time_point ts = CaptureClock::now());

 private:
  using PcapFile::PcapFile;
};

}  // namespace openib::sim::wire
