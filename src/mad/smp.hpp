// Subnet management packets (IBA 14.2.1) and the directed-route algorithm
// (IBA 14.2.2), as pure functions over a 256-byte MAD held by the caller.
//
// SMP layout (IBA 14.2.1.1 LID routed, 14.2.1.2 directed route):
//   0..23    common MAD header (mad.hpp); for DR: bytes 4-5 = D bit (15) +
//            Status (14:0), byte 6 = HopPointer, byte 7 = HopCount
//   24..31   M_Key
//   32..33   DrSLID   (DR only; LID routed: reserved)
//   34..35   DrDLID   (DR only)
//   36..63   reserved
//   64..127  SMP data (64 bytes: the attribute)
//   128..191 InitialPath (DR; one byte per hop, entry 0 unused)
//   192..255 ReturnPath  (DR)
//
// Directed route in short (IBA 14.2.2): the path runs from node 0 (the
// sender, e.g. the SM's CA) through nodes 1..HopCount. InitialPath[i] is the
// port node i-1 sends out of; ReturnPath[i] is the port node i received on
// (filled in on the way out). Outbound (D=0) a node receives with
// HopPointer == its index; the response (D=1) leaves the destination with
// HopPointer == HopCount+1 and is decremented at every send. DrSLID/DrDLID
// equal to the permissive LID 0xFFFF mean "no LID-routed part" at the
// start/end; otherwise that part is LID routed to DrDLID (outbound) or
// DrSLID (returning).
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

#include "common/iba.hpp"
#include "mad/bytes.hpp"
#include "mad/mad.hpp"

namespace openib::mad {

using iba::kPermissiveLid;  // IBA 4.1.5 (common/iba.hpp)
inline constexpr std::size_t kSmpMKeyOff = 24;
inline constexpr std::size_t kSmpDrSlidOff = 32;
inline constexpr std::size_t kSmpDrDlidOff = 34;
inline constexpr std::size_t kSmpDataOff = 64;
inline constexpr std::size_t kSmpDataBytes = 64;
inline constexpr std::size_t kSmpInitialPathOff = 128;
inline constexpr std::size_t kSmpReturnPathOff = 192;
inline constexpr std::uint8_t kSmpMaxHops = 63;  // IBA C14-6: HopCount 0..63

inline constexpr std::uint16_t kSmpDirectionBit = 0x8000;  // D bit in the status word

// ---- field access on a whole SMP (256 bytes) ---------------------------
inline std::uint64_t smp_mkey(ConstBytes m) { return get64(m, kSmpMKeyOff); }
inline void smp_set_mkey(MutBytes m, std::uint64_t v) { put64(m, kSmpMKeyOff, v); }
inline std::uint16_t smp_dr_slid(ConstBytes m) { return get16(m, kSmpDrSlidOff); }
inline std::uint16_t smp_dr_dlid(ConstBytes m) { return get16(m, kSmpDrDlidOff); }
inline void smp_set_dr_slid(MutBytes m, std::uint16_t v) { put16(m, kSmpDrSlidOff, v); }
inline void smp_set_dr_dlid(MutBytes m, std::uint16_t v) { put16(m, kSmpDrDlidOff, v); }
inline std::uint8_t smp_hop_ptr(ConstBytes m) { return get8(m, 6); }
inline std::uint8_t smp_hop_cnt(ConstBytes m) { return get8(m, 7); }
inline void smp_set_hop_ptr(MutBytes m, std::uint8_t v) { put8(m, 6, v); }
inline void smp_set_hop_cnt(MutBytes m, std::uint8_t v) { put8(m, 7, v); }
// D bit (IBA 14.2.1.2): 0 outbound request, 1 returning (response).
inline bool smp_direction(ConstBytes m) { return (get16(m, 4) & kSmpDirectionBit) != 0; }
inline void smp_set_direction(MutBytes m, bool d) {
  put16(m, 4, (get16(m, 4) & ~kSmpDirectionBit) | (d ? kSmpDirectionBit : 0));
}
// Status of an SMP: for DR the 15 low bits only, for LID routed all 16.
std::uint16_t smp_status(ConstBytes m);
void smp_set_status(MutBytes m, std::uint16_t status);
inline std::uint8_t smp_initial_path(ConstBytes m, std::size_t i) { return get8(m, kSmpInitialPathOff + (i & 63)); }
inline std::uint8_t smp_return_path(ConstBytes m, std::size_t i) { return get8(m, kSmpReturnPathOff + (i & 63)); }
inline void smp_set_initial_path(MutBytes m, std::size_t i, std::uint8_t p) { put8(m, kSmpInitialPathOff + (i & 63), p); }
inline void smp_set_return_path(MutBytes m, std::size_t i, std::uint8_t p) { put8(m, kSmpReturnPathOff + (i & 63), p); }
inline ConstBytes smp_data(ConstBytes m) { return m.subspan(kSmpDataOff, kSmpDataBytes); }
inline MutBytes smp_data(MutBytes m) { return m.subspan(kSmpDataOff, kSmpDataBytes); }

// Build a request SMP. For a directed-route SMP, `path` lists the ports
// out of each node, starting with the sender's own port
// (InitialPath[1..n] = path[0..n-1], HopCount = n); DrSLID = DrDLID =
// 0xFFFF unless given. The sender then passes it through dr_send().
struct SmpRequest {
  std::uint8_t method = method::kGet;
  std::uint16_t attr_id = 0;
  std::uint32_t attr_mod = 0;
  std::uint64_t tid = 0;
  std::uint64_t mkey = 0;
  bool directed = true;
  std::uint8_t hop_cnt = 0;                 // DR only
  std::array<std::uint8_t, 64> initial_path{};  // DR only: [1..hop_cnt] used
  std::uint16_t dr_slid = kPermissiveLid;
  std::uint16_t dr_dlid = kPermissiveLid;
};
Mad make_smp(const SmpRequest& r, ConstBytes data = {});

// ---- the directed-route algorithm, IBA 14.2.2 --------------------------

enum class DrAction : std::uint8_t {
  kLocal,     // hand the SMP to this node's SMA (request) or SM (response at hop 0)
  kForward,   // send the (updated) bytes out `port` with LRH DLID/SLID = 0xFFFF
  kLidRoute,  // leave the directed part: send LID routed to `lid` (DrDLID or DrSLID)
  kDrop,      // discard; `reason` says why (count it)
};

enum class DrDrop : std::uint8_t {
  kNone,
  kNotDirected,      // class is not 0x81
  kBadHopCount,      // HopCount > 63 (C14-6)
  kBadHopPointer,    // HopPointer outside 0..HopCount+1 for this step (C14-9:5, C14-13:5)
  kNotSwitch,        // a CA asked to relay an intermediate hop (C14-9:2, C14-13:2)
  kBadPort,          // path names a port this node does not have
  kWrongPort,        // the sender's port is not the one the path names (C14-9:1, C14-13:1)
  kNoLidRoute,       // end of DR part is not permissive at a CA (C14-9:3, C14-13:3)
};
std::string_view dr_drop_name(DrDrop r);

struct DrDecision {
  DrAction action = DrAction::kDrop;
  std::uint8_t port = 0;    // kForward: the port to send out of
  std::uint16_t lid = 0;    // kLidRoute: the destination LID; 0 = the LID the
                            // caller knows (dr_send: the node starting the DR
                            // part, or the LRH SLID of the request answered)
  DrDrop reason = DrDrop::kNone;
};

// A node receives a directed-route SMP (class 0x81) on `in_port` (for a
// switch an external port 1..num_ports; for a CA its port). Implements the
// receive half of C14-9 (D=0) and C14-13 (D=1) and, for a node that relays
// (switch hop, or the end of the DR part), the send half too: the returned
// bytes in `smp` are what goes on the wire (HopPointer already advanced,
// ReturnPath[HopPointer] recorded). For kLocal the SMP is left as the SMA
// must see it: outbound HopPointer == HopCount+1, returning HopPointer == 0.
//
// Our reading for a switch where the DR part begins after a LID-routed part
// (DrSLID != 0xFFFF, HopPointer 0 on arrival, D=0) and where a returning
// SMP re-enters the DR part (D=1, HopPointer == HopCount+1 on arrival): the
// switch acts as the sender of the DR part (as node 0, resp. node HopCount).
DrDecision dr_receive(MutBytes smp, bool is_switch, std::uint8_t in_port, std::uint8_t num_ports);

// The sending half (IBA 14.2.2.2 C14-9, 14.2.2.4 C14-13) at the node that
// originates a DR SMP: the SM's node sending a request (D=0,
// HopPointer 0), or the SMA's node sending the response (D=1, HopPointer
// HopCount+1). `out_port` is the port it is about to leave through; it must
// match the path. Advances HopPointer. Returns kForward(out_port),
// kLidRoute (the DR part ends here: send LID routed) or kLocal (HopCount 0:
// the SMP is for this very node, loop it back) or kDrop.
DrDecision dr_send(MutBytes smp, bool is_switch, std::uint8_t out_port);

// The SMA turns a request into its response in place (IBA 13.4.5,
// 14.2.2.4): Method = GetResp (0x81), status set (for DR the 15 status bits,
// D bit set; HopPointer is left as received, HopCount+1, ready for
// dr_send). The attribute data is whatever the caller put in bytes 64..127.
void smp_make_response(MutBytes smp, std::uint16_t status);

// The port a DR response must leave the responding node through: the port
// the request arrived on, which is also ReturnPath[HopCount] when
// HopCount > 0.
std::uint8_t dr_response_port(ConstBytes smp, std::uint8_t arrival_port);

}  // namespace openib::mad
