// The rsocket wire protocol of rdma-core's librdmacm (its
// librdmacm/docs/rsocket and rsocket(7)), so that our rsockets and
// rdma-core's interoperate: the facts only, written from the protocol's
// description (docs/library.md "rsockets").
//
// A stream rsocket is an RC connection made by the RDMA CM (port space
// RDMA_PS_TCP) whose private data, both ways, is one ConnData. Every message
// is an RDMA WRITE WITH IMMEDIATE (0 bytes when only the immediate matters)
// into memory the peer advertised; the immediate says what it is:
//   bits 31..29 the op, bits 28..0 its argument.
// Data goes into the receiver's ring buffer, which the receiver advertises
// in halves: the first half in ConnData.data_buf, each next half (once the
// application has read as much) as a 16-byte Sge written into the sender's
// two-entry "target SGL" (ConnData.target_sgl), entries 1, 0, 1, ... The
// receiver never reads addresses: it consumes the ring in order, so a sender
// fills each advertised half completely, entries 0, 1, 0, ..., in messages
// of 1 to 65,536 bytes. Credits bound the data messages in flight: the
// peer's receive queue depth at first, then the absolute sequence number
// each SGL message carries (16 bits).
#pragma once

#include <cstdint>
#include <cstring>
#include <endian.h>

namespace openib::rsocket {

// Message ops (the immediate's top 3 bits).
enum Op : uint32_t {
  kOpData = 0,      // argument: bytes written at the current target entry
  kOpSgl = 4,       // argument: the sender's new credit limit (16 bits)
  kOpIomapSgl = 6,  // argument: the index of the iomap entry written
  kOpCtrl = 7,      // argument: a Ctrl
};
enum Ctrl : uint32_t { kCtrlDisconnect = 0, kCtrlKeepalive = 1, kCtrlShutdown = 2 };

constexpr uint32_t imm(Op op, uint32_t arg) { return (uint32_t(op) << 29) | (arg & 0x1FFFFFFF); }
constexpr Op imm_op(uint32_t v) { return Op(v >> 29); }
constexpr uint32_t imm_arg(uint32_t v) { return v & 0x1FFFFFFF; }

constexpr uint32_t kMaxTransfer = 65536;    // largest data message
constexpr uint32_t kFirstTransfer = 2048;   // a send's first message; then doubling
constexpr uint32_t kSendLowWater = 2048;    // send space a send waits for
constexpr uint32_t kCtrlSlots = 4;          // control messages in flight
constexpr uint32_t kSglEntries = 2;         // entries of each side's target SGL
constexpr uint16_t kMinQueue = 16, kMaxQueue = 0xFFFE;
constexpr uint8_t kVersion = 1;
constexpr uint8_t kFlagBigEndian = 1, kFlagIomap = 2;

// An advertised buffer, as written into the peer's memory: in the
// receiving host's byte order (both ends little-endian here; a big-endian
// peer sets kFlagBigEndian and the writer swaps).
struct Sge {
  uint64_t addr;
  uint32_t key;
  uint32_t length;
};
static_assert(sizeof(Sge) == 16);

// A zero-copy target (riomap): where the peer may write at `offset`.
struct IomapEntry {
  uint64_t offset;
  Sge sge;
};
static_assert(sizeof(IomapEntry) == 24);

// The CM private data, both directions: 40 bytes, big-endian fields.
struct ConnData {
  uint8_t version = kVersion;
  uint8_t flags = 0;
  uint16_t credits = 0;  // BE: the sender's receive queue depth
  uint8_t reserved[3] = {};
  uint8_t target_iomap_size = 0;  // scale-encoded entries of the iomap after the SGL
  Sge target_sgl{};               // BE: the sender's target SGL (length = entries)
  Sge data_buf{};                 // BE: the first half of the sender's receive ring
};
static_assert(sizeof(ConnData) == 40);

inline Sge sge_to_be(Sge s) { return {htobe64(s.addr), htobe32(s.key), htobe32(s.length)}; }
inline Sge sge_from_be(Sge s) { return {be64toh(s.addr), be32toh(s.key), be32toh(s.length)}; }

// The 8-bit size of an iomap: exact to 128, then multiples of 256.
constexpr uint8_t iomap_scale(uint32_t v) { return v <= 128 ? uint8_t(v) : uint8_t(0x80 | ((v >> 8) & 0x7F)); }
constexpr uint32_t iomap_unscale(uint8_t s) { return s <= 128 ? s : uint32_t(s & 0x7F) << 8; }

}  // namespace openib::rsocket
