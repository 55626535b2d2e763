// RMPP, IBA 13.6: header codec, segmentation, sender and receiver machines.
#include "mad/rmpp.hpp"

#include <algorithm>

#include "mad/mad.hpp"

namespace openib::mad {

Result<RmppHeader> decode_rmpp_header(ConstBytes mad) {
  if (mad.size() < kRmppPayloadOff) return err(EPROTO, "RMPP MAD: {} bytes, need {}", mad.size(), kRmppPayloadOff);
  RmppHeader h;
  h.version = get8(mad, 24);
  h.type = get8(mad, 25);
  h.resp_time = static_cast<std::uint8_t>(get8(mad, 26) >> 3);
  h.flags = static_cast<std::uint8_t>(get8(mad, 26) & 0x7);
  h.status = get8(mad, 27);
  h.seg_num = get32(mad, 28);
  h.paylen_newwin = get32(mad, 32);
  return h;
}

void encode_rmpp_header(MutBytes mad, const RmppHeader& h) {
  put8(mad, 24, h.version);
  put8(mad, 25, h.type);
  put8(mad, 26, static_cast<std::uint8_t>((h.resp_time & 0x1F) << 3 | (h.flags & 0x7)));
  put8(mad, 27, h.status);
  put32(mad, 28, h.seg_num);
  put32(mad, 32, h.paylen_newwin);
}

std::size_t rmpp_class_header_bytes(std::uint8_t c) {
  if (c == mgmt_class::kSubnAdm) return 20;  // IBA 15.2.1.1: SM_Key, AttributeOffset, reserved, ComponentMask
  if (c >= mgmt_class::kVendorRange2Start && c <= mgmt_class::kVendorRange2End) return 4;  // reserved + OUI
  return 0;
}

bool rmpp_class_allowed(std::uint8_t c) {
  return c == mgmt_class::kSubnAdm || c == mgmt_class::kDevMgt || c == mgmt_class::kBis ||
         c == mgmt_class::kCongMgmt ||
         (c >= mgmt_class::kVendorRange2Start && c <= mgmt_class::kVendorRange2End);
}

// IBA 13.6.3.1 / kernel mad_rmpp.c: every segment = common header + RMPP
// header + class header + up to seg_data bytes of data.
Result<std::vector<Mad>> rmpp_segment(ConstBytes message, std::size_t class_hdr_bytes, std::size_t max_segments) {
  const std::size_t hdr = kRmppPayloadOff + class_hdr_bytes;
  if (class_hdr_bytes >= kRmppSegmentPayload) return err(EINVAL, "RMPP class header of {} bytes", class_hdr_bytes);
  if (message.size() < hdr) return err(EINVAL, "RMPP message of {} bytes, headers need {}", message.size(), hdr);
  if (message.size() > kMaxRmppMessage)
    return err(EMSGSIZE, "RMPP message of {} bytes, over the {}-byte limit", message.size(), kMaxRmppMessage);
  const std::size_t seg_data = kMadBytes - hdr;
  const std::size_t data_len = message.size() - hdr;
  const std::size_t n = std::max<std::size_t>(1, (data_len + seg_data - 1) / seg_data);
  if (n > max_segments) return err(EINVAL, "RMPP message needs {} segments (max {})", n, max_segments);
  const std::size_t pad = n * seg_data - data_len;
  std::vector<Mad> out(n);
  for (std::size_t i = 0; i < n; ++i) {
    Mad& m = out[i];
    m.fill(std::byte{0});
    std::copy_n(message.begin(), kRmppHeaderOff, m.begin());
    std::copy_n(message.begin() + kRmppPayloadOff, class_hdr_bytes, m.begin() + kRmppPayloadOff);
    std::size_t off = i * seg_data;
    std::size_t len = std::min(seg_data, data_len - std::min(off, data_len));
    std::copy_n(message.begin() + static_cast<std::ptrdiff_t>(hdr + off), len, m.begin() + static_cast<std::ptrdiff_t>(hdr));
    RmppHeader h;
    h.type = rmpp_type::kData;
    h.resp_time = static_cast<std::uint8_t>(get8(message, 26) >> 3);
    if (h.resp_time == 0) h.resp_time = 0x1F;
    h.flags = rmpp_flag::kActive;
    h.seg_num = static_cast<std::uint32_t>(i + 1);
    if (i == 0) {
      h.flags |= rmpp_flag::kFirst;
      h.paylen_newwin = static_cast<std::uint32_t>(n * kRmppSegmentPayload - pad);
    }
    if (i + 1 == n) {
      h.flags |= rmpp_flag::kLast;
      h.paylen_newwin = static_cast<std::uint32_t>(kRmppSegmentPayload - pad);
    }
    encode_rmpp_header(m, h);
  }
  return out;
}

namespace {
Mad answer(ConstBytes about, const RmppHeader& h) {
  Mad m{};
  std::copy_n(about.begin(), std::min(about.size(), kRmppHeaderOff), m.begin());
  put8(m, 3, get8(m, 3) ^ method::kResponseBit);  // kernel format_ack: R bit flipped
  encode_rmpp_header(m, h);
  return m;
}
}  // namespace

Mad rmpp_make_ack(ConstBytes about, std::uint32_t seg_num, std::uint32_t new_window_last) {
  RmppHeader h;
  h.type = rmpp_type::kAck;
  h.flags = rmpp_flag::kActive;
  h.seg_num = seg_num;
  h.paylen_newwin = new_window_last;
  return answer(about, h);
}

Mad rmpp_make_stop_abort(ConstBytes about, std::uint8_t type, std::uint8_t status) {
  RmppHeader h;
  h.type = type;
  h.flags = rmpp_flag::kActive;
  h.status = status;
  return answer(about, h);
}

// ---- receiver ------------------------------------------------------------

RmppReassembler::RmppReassembler(std::size_t class_hdr_bytes, Config cfg)
    : class_hdr_(std::min<std::size_t>(class_hdr_bytes, kRmppSegmentPayload - 1)), cfg_(cfg) {
  if (cfg_.window == 0) cfg_.window = 1;
}

RmppReassembler::Step RmppReassembler::fail(ConstBytes about, std::uint8_t type, std::uint8_t status) {
  failed_ = true;
  Step s;
  s.failed = true;
  s.status = status;
  s.to_send.push_back(rmpp_make_stop_abort(about, type, status));
  return s;
}

// IBA 13.6.4 (receiver), kernel mad_rmpp.c process_rmpp_data.
RmppReassembler::Step RmppReassembler::feed(ConstBytes mad) {
  Step s;
  if (done_ || failed_ || mad.size() < kMadBytes) return s;
  auto hr = decode_rmpp_header(mad);
  if (!hr) return s;
  const RmppHeader& h = *hr;
  if (h.version != kRmppVersion) return fail(mad, rmpp_type::kAbort, rmpp_status::kUnsupportedVersion);
  if (h.type == rmpp_type::kStop || h.type == rmpp_type::kAbort) {
    failed_ = true;
    s.failed = true;
    s.status = h.status;
    return s;
  }
  if (h.type != rmpp_type::kData || !(h.flags & rmpp_flag::kActive))
    return fail(mad, rmpp_type::kAbort, rmpp_status::kBadRmppType);
  if (h.status != rmpp_status::kNormal) return fail(mad, rmpp_type::kAbort, rmpp_status::kIllegalStatus);
  const bool first = (h.flags & rmpp_flag::kFirst) != 0;
  const bool last = (h.flags & rmpp_flag::kLast) != 0;
  if (first != (h.seg_num == 1) || h.seg_num == 0)
    return fail(mad, rmpp_type::kAbort, rmpp_status::kInconsistentFirstAndSegNum);

  if (h.seg_num < expected_) {  // duplicate: the sender missed our ACK
    s.to_send.push_back(rmpp_make_ack(mad, expected_ - 1, newwin_));
    return s;
  }
  if (h.seg_num > expected_) return s;  // lost one before it: drop, the sender resends from our last ACK
  const std::size_t hdr = kRmppPayloadOff + class_hdr_;
  const std::size_t seg_data = kMadBytes - hdr;
  if (first) {
    // PayloadLength of the first segment announces the total; refuse what
    // we cannot hold (STOP, resources exhausted).
    if (h.paylen_newwin > cfg_.max_bytes) return fail(mad, rmpp_type::kStop, rmpp_status::kResourcesExhausted);
    buf_.assign(mad.begin(), mad.begin() + static_cast<std::ptrdiff_t>(hdr));
  }
  std::size_t take = seg_data;
  if (last) {
    if (h.paylen_newwin > kRmppSegmentPayload || h.paylen_newwin < class_hdr_)
      return fail(mad, rmpp_type::kAbort, rmpp_status::kInconsistentLastAndLength);
    take = h.paylen_newwin - class_hdr_;
  }
  if (buf_.size() + take > cfg_.max_bytes + hdr) return fail(mad, rmpp_type::kStop, rmpp_status::kResourcesExhausted);
  buf_.insert(buf_.end(), mad.begin() + static_cast<std::ptrdiff_t>(hdr),
              mad.begin() + static_cast<std::ptrdiff_t>(hdr + take));
  ++expected_;
  if (h.seg_num == newwin_ || last) {
    newwin_ = h.seg_num + cfg_.window;
    s.to_send.push_back(rmpp_make_ack(mad, h.seg_num, newwin_));
  }
  if (last) {
    done_ = true;
    // The reassembled message: RMPP header as the kernel leaves it for the
    // user (IBA 13.6.2: the first segment's, with Last set).
    RmppHeader mh = *decode_rmpp_header(buf_);
    mh.flags |= rmpp_flag::kLast;
    encode_rmpp_header(buf_, mh);
    s.message = std::move(buf_);
    buf_.clear();
  }
  return s;
}

// ---- sender --------------------------------------------------------------

RmppSender::RmppSender(std::vector<Mad> segments, unsigned max_retries)
    : segs_(std::move(segments)), max_retries_(max_retries) {}

RmppSender::Step RmppSender::send_window() {
  Step s;
  std::uint32_t end = std::min<std::uint32_t>(newwin_, static_cast<std::uint32_t>(segs_.size()));
  for (std::uint32_t i = std::max(last_acked_, last_sent_) + 1; i <= end; ++i) s.to_send.push_back(segs_[i - 1]);
  last_sent_ = std::max(last_sent_, end);
  return s;
}

RmppSender::Step RmppSender::start() {
  if (segs_.empty()) {
    failed_ = true;
    Step s;
    s.failed = true;
    s.status = rmpp_status::kUnspecified;
    return s;
  }
  return send_window();
}

// IBA 13.6.3.2 (sender receives ACK/STOP/ABORT).
RmppSender::Step RmppSender::on_mad(ConstBytes mad) {
  Step s;
  if (complete_ || failed_ || mad.size() < kMadBytes || segs_.empty()) return s;
  auto hr = decode_rmpp_header(mad);
  if (!hr) return s;
  const RmppHeader& h = *hr;
  auto abort = [&](std::uint8_t status) {
    failed_ = true;
    Step a;
    a.failed = true;
    a.status = status;
    a.to_send.push_back(rmpp_make_stop_abort(mad, rmpp_type::kAbort, status));  // flips the ACK's R bit back
    return a;
  };
  if (h.version != kRmppVersion) return abort(rmpp_status::kUnsupportedVersion);
  if (h.type == rmpp_type::kStop || h.type == rmpp_type::kAbort) {
    failed_ = true;
    s.failed = true;
    s.status = h.status;
    return s;
  }
  if (h.type != rmpp_type::kAck) return abort(rmpp_status::kBadRmppType);
  const auto total = static_cast<std::uint32_t>(segs_.size());
  if (h.seg_num > total) return abort(rmpp_status::kSegNumTooBig);
  if (h.paylen_newwin < h.seg_num) return abort(rmpp_status::kNewWindowLastTooSmall);
  if (h.seg_num < last_acked_) return s;  // stale ACK
  if (h.seg_num > last_acked_) retries_ = 0;
  last_acked_ = h.seg_num;
  newwin_ = std::max(newwin_, h.paylen_newwin);
  if (last_acked_ == total) {
    complete_ = true;
    s.complete = true;
    return s;
  }
  return send_window();
}

RmppSender::Step RmppSender::on_timeout() {
  if (complete_ || failed_ || segs_.empty()) return {};
  if (++retries_ > max_retries_) {
    failed_ = true;
    Step a;
    a.failed = true;
    a.status = rmpp_status::kTooManyRetries;
    Mad m = rmpp_make_stop_abort(segs_[0], rmpp_type::kAbort, rmpp_status::kTooManyRetries);
    put8(m, 3, get8(segs_[0], 3));  // the sender's own method, not flipped
    a.to_send.push_back(m);
    return a;
  }
  last_sent_ = last_acked_;  // IBA 13.6.3.3: resend the window from the last ACKed segment
  return send_window();
}

}  // namespace openib::mad
