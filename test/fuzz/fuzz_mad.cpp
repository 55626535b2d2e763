// libFuzzer target: arbitrary bytes into the MAD codecs (src/mad): every
// attribute decoder (decode -> encode -> decode must give the same value),
// the directed-route algorithm at a switch and at a CA, and the RMPP
// reassembler fed a stream of MADs cut from the input. Nothing may crash,
// read out of bounds or grow without bound.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <span>

#include "codec_round_trip.hpp"
#include "mad/mad.hpp"
#include "mad/pma_attrs.hpp"
#include "mad/rmpp.hpp"
#include "mad/sma_attrs.hpp"
#include "mad/smp.hpp"

using namespace openib::mad;

using openib::fuzz::round_trip;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  ConstBytes in(reinterpret_cast<const std::byte*>(data), size);
  (void)decode_header(in);
  round_trip(in, decode_node_info, encode_node_info, kNodeInfoBytes);
  round_trip(in, decode_port_info, encode_port_info, kPortInfoBytes);
  round_trip(in, decode_switch_info, encode_switch_info, kSwitchInfoBytes);
  round_trip(in, decode_sm_info, encode_sm_info, kSmInfoBytes);
  round_trip(in, decode_notice, encode_notice, kNoticeBytes);
  round_trip(in, decode_guid_block, encode_guid_block, 64);
  round_trip(in, decode_pkey_block, encode_pkey_block, 64);
  round_trip(in, decode_sl2vl, encode_sl2vl, 8);
  round_trip(in, decode_vlarb_block, encode_vlarb_block, 64);
  round_trip(in, decode_lft_block, encode_lft_block, 64);
  round_trip(in, decode_mft_block, encode_mft_block, 64);
  round_trip(in, decode_class_port_info, encode_class_port_info, kClassPortInfoBytes);
  round_trip(in, decode_port_counters, encode_port_counters, kPortCountersBytes);
  round_trip(in, decode_port_counters_ext, encode_port_counters_ext, kPortCountersExtBytes);
  if (auto d = decode_node_description(in); d.ok() && d->size() > kNodeDescriptionBytes) std::abort();
  (void)decode_rmpp_header(in);

  // Directed route on the first 256 bytes, at a switch and at a CA, both
  // directions of sending.
  if (size >= kMadBytes) {
    Mad m{};
    std::copy_n(in.begin(), kMadBytes, m.begin());
    const std::uint8_t port = static_cast<std::uint8_t>(size % 40);
    for (bool sw : {true, false}) {
      Mad a = m;
      auto d = dr_receive(a, sw, port, 36);
      if (d.action == DrAction::kForward && (d.port == 0 || d.port > 36)) std::abort();
      if (smp_hop_ptr(a) > kSmpMaxHops + 1 && d.action != DrAction::kDrop) std::abort();
      Mad b = m;
      (void)dr_send(b, sw, port);
      smp_make_response(b, status::kInvalidAttrValue);
    }
  }

  // RMPP: the input cut into 256-byte MADs fed to a reassembler; what it
  // builds stays within its bound. Then segment the input and reassemble it.
  {
    RmppReassembler r(size % 2 ? 20 : 0, {4096, static_cast<std::uint32_t>(size % 5)});
    for (std::size_t off = 0; off + kMadBytes <= size; off += kMadBytes) {
      auto st = r.feed(in.subspan(off, kMadBytes));
      if (st.message && st.message->size() > 4096 + 56) std::abort();
      if (st.to_send.size() > 1) std::abort();
    }
    if (size >= 56) {
      auto segs = rmpp_segment(in, 20, 64);
      if (segs.ok()) {
        RmppReassembler rx(20, {1u << 20, 8});
        std::optional<ByteVec> got;
        for (auto& s : *segs) {
          auto st = rx.feed(s);
          if (st.failed) std::abort();
          if (st.message) got = std::move(st.message);
        }
        if (!got || got->size() != size) std::abort();
        if (!std::equal(got->begin() + 36, got->end(), in.begin() + 36)) std::abort();
      }
    }
  }
  return 0;
}
