// docs/simhca.md §12.1, §12.2, §12.4 from the driver's side: the hca
// types mapped onto src/prm's encoders and decoder.
#include "hca/work_queue.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>

namespace openib::hca {

// hca::QpType is §6.10's `type`, so it converts by cast.
static_assert(uint8_t(QpType::kRc) == uint8_t(dp::QpType::kRc) && uint8_t(QpType::kUc) == uint8_t(dp::QpType::kUc) &&
              uint8_t(QpType::kUd) == uint8_t(dp::QpType::kUd) && uint8_t(QpType::kSmi) == uint8_t(dp::QpType::kSmi) &&
              uint8_t(QpType::kGsi) == uint8_t(dp::QpType::kGsi) && uint8_t(QpType::kRaw) == uint8_t(dp::QpType::kRaw));

namespace {

constexpr uint32_t kUnbounded = std::numeric_limits<uint32_t>::max();

dp::SendWqe to_dp(const SendWr& wr) {
  dp::SendWqe w;
  w.opcode = wr.opcode;
  w.flags = (wr.signaled ? dp::kFlagSignaled : 0) | (wr.solicited ? dp::kFlagSolicited : 0) |
            (wr.inline_data ? dp::kFlagInline : 0) | (wr.fence ? dp::kFlagFence : 0);
  w.imm = wr.imm;
  w.wr_id = wr.wr_id;
  w.ahn = wr.ahn;
  w.dest_qpn = wr.remote_qpn;
  w.qkey = wr.remote_qkey;
  w.remote_va = wr.remote_addr;
  w.rkey = wr.rkey;
  w.swap_add = wr.swap_add;
  w.compare = wr.compare;
  return w;
}

}  // namespace

Result<void> write_send_wqe(std::span<std::byte> slot, const SendWr& wr, QpType type, const dp::SqLimits& lim) {
  const auto e = dp::encode_send_wqe(slot.data(), slot.size(), static_cast<dp::QpType>(type), to_dp(wr),
                                     std::span<const Sge>(wr.sg), lim);
  if (e != dp::WqeError::kNone) return err(EINVAL, "send WQE (wr_id {:#x}): {}", wr.wr_id, dp::error_name(e));
  return ok();
}

Result<void> write_recv_wqe(std::span<std::byte> slot, const RecvWr& wr, uint32_t max_sge) {
  const auto e = dp::encode_recv_wqe(slot.data(), slot.size(), wr.wr_id, std::span<const Sge>(wr.sg), max_sge);
  if (e != dp::WqeError::kNone) return err(EINVAL, "receive WQE (wr_id {:#x}): {}", wr.wr_id, dp::error_name(e));
  return ok();
}

Result<Bytes> encode_send_wqe(const SendWr& wr, QpType type) {
  // Room for the largest stride; the QP's own stride is the caller's check.
  Bytes w(size_t{1} << dp::kMaxLogSqStride);
  OPENIB_TRY(write_send_wqe(w, wr, type, {kUnbounded, kUnbounded}));
  w.resize(std::to_integer<size_t>(w[dp::kCtrlNumDs]) * dp::kSeg);
  return w;
}

Bytes encode_recv_wqe(const RecvWr& wr) {
  Bytes w(dp::kSeg * (1 + wr.sg.size()));
  (void)write_recv_wqe(w, wr, kUnbounded);  // only over 255 SGEs fails: see the header
  return w;
}

WorkCompletion decode_cqe(std::span<const std::byte> b) {
  if (b.size() >= dp::kCqeSize) return dp::decode_cqe(b.data());
  std::array<std::byte, dp::kCqeSize> e{};
  std::copy(b.begin(), b.end(), e.begin());
  return dp::decode_cqe(e.data());
}

}  // namespace openib::hca
